"""Send a custom resource request to `make local` as CloudFormation would, and print the answer.

    .venv/bin/python examples/functions/send.py Custom::Reservation '{"Name": "ada"}'
    .venv/bin/python examples/functions/send.py --request-type Delete --physical-id reservation-ada \
        Custom::Reservation '{"Name": "ada"}'

Reads the environment `make local` wrote (--env, default .local/env.json), publishes the
request to the first customer region's ServiceToken topic with a presigned ResponseURL into the
environment's response bucket, waits for the answer there and prints it. Exits 0 on SUCCESS,
1 on FAILED, 2 if no answer came within --timeout-s. Needs boto3 (the venv has it).
"""
import argparse
import json
import sys
import time
import uuid

import boto3
import botocore.exceptions


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("resource_type", help="the custom resource type, Custom::Name")
    parser.add_argument("properties", nargs="?", default="{}", help="ResourceProperties, a JSON object")
    parser.add_argument("--env", default=".local/env.json", help="the file `make local` wrote")
    parser.add_argument("--request-type", default="Create", choices=["Create", "Update", "Delete"])
    parser.add_argument("--physical-id", help="PhysicalResourceId, for an Update or a Delete")
    parser.add_argument("--old-properties", default="{}", help="OldResourceProperties of an Update, JSON")
    parser.add_argument("--stack-name", default="send", help="the stack the request comes from")
    parser.add_argument("--timeout-s", type=float, default=120)
    args = parser.parse_args()

    try:
        env = json.load(open(args.env))
    except FileNotFoundError:
        sys.exit(f"{args.env} is not there: start `make local` first (it writes that file)")
    aws = dict(endpoint_url=env["endpoint_url"], aws_access_key_id="test", aws_secret_access_key="test")
    s3 = boto3.client("s3", region_name=env["primary_region"], **aws)
    request_id = str(uuid.uuid4())
    key = f"send/{request_id}"
    # An https:// ResponseURL, as CloudFormation's are (the handlers trust the local CA).
    https = boto3.client("s3", region_name=env["primary_region"], **{**aws, "endpoint_url": env["https_endpoint_url"]})
    url = https.generate_presigned_url(
        "put_object", Params={"Bucket": env["response_bucket"], "Key": key}, ExpiresIn=7200
    )
    topic = env["topic_arn"]
    request = {
        "RequestType": args.request_type,
        "ServiceToken": topic,
        "ResponseURL": url,
        "StackId": f"arn:aws:cloudformation:{env['customer_region']}:123456789012:stack/{args.stack_name}/0",
        "RequestId": request_id,
        "LogicalResourceId": "MyResource",
        "ResourceType": args.resource_type,
        "ResourceProperties": {"ServiceToken": topic, **json.loads(args.properties)},
    }
    if args.physical_id:
        request["PhysicalResourceId"] = args.physical_id
    if args.request_type == "Update":
        request["OldResourceProperties"] = {"ServiceToken": topic, **json.loads(args.old_properties)}
    sns = boto3.client("sns", region_name=env["customer_region"], **aws)
    sns.publish(TopicArn=topic, Message=json.dumps(request))
    print(f"sent {args.request_type} {args.resource_type} (RequestId {request_id}); waiting for the answer",
          file=sys.stderr, flush=True)

    deadline = time.monotonic() + args.timeout_s
    while time.monotonic() < deadline:
        try:
            body = s3.get_object(Bucket=env["response_bucket"], Key=key)["Body"].read()
        except botocore.exceptions.ClientError:
            time.sleep(0.2)
            continue
        answer = json.loads(body)
        print(json.dumps(answer, indent=2, sort_keys=True), flush=True)
        sys.exit(0 if answer.get("Status") == "SUCCESS" else 1)
    print(f"no answer within {args.timeout_s:g} s: is `make local` running, and does it serve "
          f"{args.resource_type}? (see its output, and its function logs)", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
