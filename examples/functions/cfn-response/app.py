"""A custom resource that answers CloudFormation itself, the way `cfnresponse` and crhelper do:
it PUTs its own answer to the event's ResponseURL.

Behind cfn-once, the ResponseURL it is given is not CloudFormation's but a presigned URL of an
object in cfn-once's own bucket, for this execution only; cfn-once checks what lands there and
answers CloudFormation exactly once. The function's code is unchanged.

Properties:
  Name  what to name the resource (required)

Environment:
  GREETING  the word it greets with (default "hello")
"""
import json
import os
import urllib.request


def send(event, context, status, data, physical_id, reason=None):
    # What the cfnresponse module does (cfnresponse.send), with the standard library only.
    body = json.dumps({
        "Status": status,
        "Reason": reason or f"See the details in CloudWatch Log Stream: {context.log_stream_name}",
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "NoEcho": False,
        "Data": data,
    }).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"content-type": "", "content-length": str(len(body))})
    with urllib.request.urlopen(request, timeout=10) as response:
        print(f"answer PUT: {response.status}", flush=True)


def handler(event, context):
    print(json.dumps({"RequestType": event["RequestType"], "LogicalResourceId": event["LogicalResourceId"]}), flush=True)
    props = event.get("ResourceProperties", {})
    if event["RequestType"] == "Delete":
        send(event, context, "SUCCESS", {}, event["PhysicalResourceId"])
        return
    name = props.get("Name")
    if not name:
        send(event, context, "FAILED", {}, event.get("PhysicalResourceId", "none"), "Name is required")
        return
    send(event, context, "SUCCESS", {"Greeting": f"{os.environ.get('GREETING', 'hello')}, {name}"}, f"greeting-{name}")
