"""The Python peer of `make bench`: CloudFormation custom resources "the Python way".

It is what a Python team would deploy instead of cfn-once, for the benchmark to measure side by
side with it. Lambda's SQS event source mapping invokes it with a batch of records; each record's
body is the SNS notification that CloudFormation published for a custom resource. For every
record it unwraps the envelope, runs the request through crhelper's `CfnResource` (an Echo
provider: Create and Update answer a PhysicalResourceId derived from the LogicalResourceId, with
the ResourceProperties as Data; Delete does nothing), and crhelper PUTs the response to the
request's ResponseURL. Powertools' idempotency utility, keyed on StackId, RequestId and
LogicalResourceId in a DynamoDB table, makes that happen once per request however often SQS
delivers it, and Powertools' batch utility reports the records that failed, so that SQS retries
only those.

It departs from the libraries' documented use in two places, each explained where it is made:
crhelper's timeout timer is off, and a record without the fields crhelper needs is failed before
crhelper sees it. Everything it sends goes over HTTPS with certificate verification on, as in
production: the benchmark's endpoint and ResponseURLs are a local TLS front, and the process
trusts the front's CA through the standard variables (AWS_CA_BUNDLE for botocore, SSL_CERT_FILE
for the default SSL context crhelper's PUT uses), not through any change here.

Started by awslambdaric, from this directory:
    python -m awslambdaric handler.lambda_handler
"""

import hashlib
import json
import logging
import os

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from crhelper import CfnResource

logger = logging.getLogger(__name__)

# How long a request stays answered: as long as cfn-once keeps its lease records by default
# (CFN_ONCE_RETENTION_DAYS=30), so both sides suppress a duplicate over the same window. A
# duplicate that SQS delivers after this would be answered again.
IDEMPOTENCY_EXPIRES_AFTER_S = 30 * 24 * 60 * 60

# CloudFormation's own properties, which the Echo provider does not echo (as cfn-once's does not).
RESERVED_PROPERTIES = ("ServiceToken", "ServiceTimeout")

# The fields crhelper reads before it takes the request's ResponseURL. If one is missing,
# crhelper answers FAILED to the ResponseURL of the request it handled before (the helper is
# reused across records and invocations), or, in a fresh process, retries a PUT to an empty
# host until the invocation times out. So a request without them is failed before crhelper.
REQUIRED_FIELDS = ("RequestType", "ResponseURL", "StackId", "RequestId", "LogicalResourceId")


class UntimedCfnResource(CfnResource):
    """crhelper's CfnResource without its timeout timer.

    crhelper arms a timer for every request that PUTs FAILED half a second before the
    invocation's deadline. In an SQS batch that deadline is the whole batch's, and the timer
    would race the record's own PUT, so a request could be answered twice. A record that
    outlives its invocation is instead redelivered by SQS, and Powertools' in-progress expiry
    (from `register_lambda_context`) lets the redelivery take it over.
    """

    def _set_timeout(self):
        pass


# INFO, not crhelper's default DEBUG: at DEBUG crhelper logs every event and the ResponseURL,
# a presigned secret. sleep_on_delete=0: by default crhelper sleeps up to 120 s before
# answering a Delete, waiting for CloudWatch Logs. No poll_* handler is registered, so crhelper
# never polls (its CloudWatch Events rules); it answers once, synchronously, in `helper(...)`.
helper = UntimedCfnResource(json_logging=False, log_level="INFO", boto_level="ERROR", sleep_on_delete=0)

processor = BatchProcessor(event_type=EventType.SQS)
persistence_layer = DynamoDBPersistenceLayer(table_name=os.environ["BENCH_IDEMPOTENCY_TABLE"])
config = IdempotencyConfig(
    event_key_jmespath="[StackId, RequestId, LogicalResourceId]",
    # A request without these fields is malformed: fail it rather than answer it unguarded.
    raise_on_no_idempotency_key=True,
    expires_after_seconds=IDEMPOTENCY_EXPIRES_AFTER_S,
)


def _physical_id(event):
    """The same id for every Create and Update of one resource, so an Update never replaces it."""
    digest = hashlib.sha256(f"{event['StackId']}|{event['LogicalResourceId']}".encode()).hexdigest()
    return f"{event['LogicalResourceId']}-{digest[:16]}"


def _echo(event, _context):
    properties = event.get("ResourceProperties", {})
    helper.Data.update({name: value for name, value in properties.items() if name not in RESERVED_PROPERTIES})
    return _physical_id(event)


@helper.create
def create(event, context):
    return _echo(event, context)


@helper.update
def update(event, context):
    return _echo(event, context)


@helper.delete
def delete(_event, _context):
    # Nothing to delete; crhelper answers with the PhysicalResourceId the request carries.
    pass


@idempotent_function(data_keyword_argument="request", config=config, persistence_store=persistence_layer)
def answer(request, context=None):
    """Answers one CloudFormation request through crhelper; runs once per request."""
    helper(request, context)
    logger.info("answered %s %s request %s", request["RequestType"], request["LogicalResourceId"], request["RequestId"])
    # What Powertools stores as this request's result. Not crhelper's Status: when crhelper
    # catches an error itself it answers FAILED but leaves Status as it was.
    return {"PhysicalResourceId": str(helper.PhysicalResourceId)}


def record_handler(record: SQSRecord, lambda_context=None):
    envelope = record.json_body
    if envelope.get("Type") != "Notification":
        raise ValueError(f"record {record.message_id} is not an SNS notification: expected Type Notification")
    request = json.loads(envelope["Message"])
    if not isinstance(request, dict):
        raise ValueError(f"record {record.message_id} does not carry a CloudFormation request: expected a JSON object")
    missing = [name for name in REQUIRED_FIELDS if not isinstance(request.get(name), str) or not request[name]]
    if missing:
        raise ValueError(f"record {record.message_id} is not a CloudFormation request: missing {', '.join(missing)}")
    answer(request=request, context=lambda_context)


def lambda_handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=processor,
        context=context,
    )
