"""A custom resource written with the cfnresponse module, as CloudFormation's documentation
shows it, with cfnresponse as published on PyPI (requirements.txt), unmodified.

cfnresponse answers CloudFormation itself: it PUTs to the event's ResponseURL with urllib3.
Behind cfn-once that URL is a presigned URL of cfn-once's answer bucket, which the local
environment serves over HTTPS with a CA the function trusts through SSL_CERT_FILE.

Properties:
  Name      what to greet; the resource is named after it
  FailWith  Create and Update fail with this message, answered FAILED by the function
  RaiseWith the function raises this message without answering
"""
import cfnresponse

print(f"cfnresponse from {cfnresponse.__file__}", flush=True)


def handler(event, context):
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, event["PhysicalResourceId"])
        return
    if "RaiseWith" in props:
        raise RuntimeError(props["RaiseWith"])
    try:
        if "FailWith" in props:
            raise ValueError(props["FailWith"])
        name = props["Name"]
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Greeting": f"hello, {name}"}, f"greeting-{name}")
    except Exception as error:
        # The documented pattern: FAILED with the error, the log stream as the resource's name.
        cfnresponse.send(event, context, cfnresponse.FAILED, {}, reason=str(error))
