"""A custom resource written for the AWS CDK Provider framework: an `onEvent` and an `isComplete`.

cfn-once calls it as the framework does (its code unchanged), from whichever region answers the
request, and never passes it the ResponseURL. It makes a "reservation" that takes a while to be
ready: `onEvent` starts it and returns at once, `isComplete` says when it is ready.

Properties:
  Name      what to reserve (required)
  ReadyInS  how long the reservation takes to be ready (default 0: ready at once)
  FailWith  if set, onEvent raises an error with this message (a FAILED answer)
  SleepS    if set, onEvent sleeps this long first (to outlast the function timeout)
"""
import json
import time


def _log(what, event):
    # The whole event, as many real functions log it: cfn-once keeps the ResponseURL out of it.
    print(json.dumps({"handler": what, "event": event}, sort_keys=True), flush=True)


def on_event(event, context):
    _log("onEvent", event)
    props = event.get("ResourceProperties", {})
    if props.get("SleepS"):
        time.sleep(float(props["SleepS"]))
    if props.get("FailWith"):
        raise RuntimeError(props["FailWith"])
    request_type = event["RequestType"]
    if request_type == "Delete":
        return {}
    name = props["Name"]
    ready_at = time.time() + float(props.get("ReadyInS", "0"))
    cfn_once = event.get("CfnOnce", {})
    return {
        "PhysicalResourceId": f"reservation-{name}",
        "Data": {
            "Name": name,
            "ReadyAt": f"{ready_at:.3f}",
            "StartedIn": cfn_once.get("Region", "?"),
            "Blob": props.get("BlobBytes") and "x" * int(props["BlobBytes"]) or "",
        },
    }


def is_complete(event, context):
    _log("isComplete", event)
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    ready_at = float(event.get("Data", {}).get("ReadyAt", "0"))
    if time.time() < ready_at:
        return {"IsComplete": False}
    return {"IsComplete": True, "Data": {"Ready": "true", "CompletedIn": event.get("CfnOnce", {}).get("Region", "?")}}
