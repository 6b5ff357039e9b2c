"""A custom resource written with crhelper (https://github.com/aws-cloudformation/custom-resource-helper)
as its README shows, with crhelper as published on PyPI (requirements.txt), unmodified.

crhelper answers CloudFormation itself: it PUTs to the event's ResponseURL over an HTTPS
connection whatever the URL's scheme (http.client.HTTPSConnection on the URL's host), retrying
until it succeeds. Behind cfn-once that URL is a presigned URL of cfn-once's answer bucket, which
the local environment serves over HTTPS with a CA the function trusts through SSL_CERT_FILE.

Properties:
  Name      what to greet; the resource is named after it
  FailWith  Create and Update raise this message, which crhelper answers FAILED with
"""
from crhelper import CfnResource
import crhelper

print(f"crhelper from {crhelper.__file__}", flush=True)

helper = CfnResource()


@helper.create
@helper.update
def greet(event, _context):
    props = event["ResourceProperties"]
    if "FailWith" in props:
        raise RuntimeError(props["FailWith"])
    helper.Data["Greeting"] = f"hello, {props['Name']}"
    return f"greeting-{props['Name']}"


@helper.delete
def forget(_event, _context):
    # Nothing to delete; crhelper answers with the event's PhysicalResourceId.
    pass


def handler(event, context):
    helper(event, context)
