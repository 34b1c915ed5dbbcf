"""Checks template.yaml without AWS: cfn-lint on the SAM template, SAM's own
translation to CloudFormation (aws-sam-translator, offline), cfn-lint on
that, and a policy check on the translated IAM: no statement may reach
beyond the table, its indexes and stream, the dead-letter queue and the
functions' own log groups; and the parameter rule that keeps snapshots alive
as long as their longest window, evaluated over every admitted window set.
Every copy of the build's version in the template (the `Version` output,
`TableInit`'s `Version`, the functions' `zae-limiter:lambda-version` tags as
0.17.0+rust.<version>) equals Cargo.toml's workspace version.

    check_template.py [TEMPLATE]      exit 0 when every check passes

The policy check is also run on a copy with one broadened statement, which
it must reject (a check that cannot fail proves nothing).
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "Cargo.toml"), "rb") as _cargo:
    # The one source of the build's version; the template repeats it as literals.
    BUILD_VERSION = tomllib.load(_cargo)["workspace"]["package"]["version"]
LAMBDA_VERSION = f"0.17.0+rust.{BUILD_VERSION}"

TABLE_ARN = "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${ExistingTableName}"
ALLOWED_RESOURCES = [
    {"Fn::GetAtt": ["Table", "Arn"]},
    {"Fn::Sub": "${Table.Arn}/index/*"},
    {"Fn::Sub": "${Table.Arn}/stream/*"},
    {"Fn::Sub": TABLE_ARN},
    {"Fn::Sub": TABLE_ARN + "/index/*"},
    {"Fn::Sub": TABLE_ARN + "/stream/*"},
    {"Fn::GetAtt": ["AggregatorDeadLetters", "Arn"]},
    {"Fn::GetAtt": ["FollowUpDeadLetters", "Arn"]},
    {"Fn::GetAtt": ["AggregatorLogs", "Arn"]},
    {"Fn::GetAtt": ["ProvisionerLogs", "Arn"]},
    # The audit archive's objects, when it is on.
    {"Fn::Sub": "${AuditArchiveBucket.Arn}/audit/*"},
    # The provisioner's follow-ups: an asynchronous invoke of its own alias.
    {"Fn::Sub": [
        "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${Prefix}-limits-provisioner:follow-up",
        {"Prefix": {"Fn::If": ["DefaultPrefix", {"Ref": "AWS::StackName"}, {"Ref": "FunctionNamePrefix"}]}},
    ]},
]
# What each function's code really calls, and nothing more.
ALLOWED_ACTIONS = {
    "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem", "s3:PutObject",
    "dynamodb:Query", "dynamodb:DescribeTable", "dynamodb:DescribeStream", "dynamodb:GetRecords",
    "dynamodb:GetShardIterator", "dynamodb:ListStreams", "sqs:SendMessage",
    "logs:CreateLogStream", "logs:PutLogEvents", "sts:AssumeRole", "lambda:InvokeFunction",
}


# The client policies (AWS::IAM::ManagedPolicy, for the application's roles,
# as the 0.17.0 stack offered them): what each may grant, on the table and its
# indexes only.
CLIENT_READS = {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}
CLIENT_POLICIES = {
    "AcquireOnlyPolicy": CLIENT_READS | {"dynamodb:ConditionCheckItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
    "FullAccessPolicy": CLIENT_READS | {"dynamodb:Scan", "dynamodb:DescribeTable", "dynamodb:PutItem",
                                        "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
                                        "dynamodb:ConditionCheckItem"},
    "ReadOnlyPolicy": CLIENT_READS | {"dynamodb:Scan", "dynamodb:DescribeTable"},
}
WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}


class StubPolicyLoader:
    """SAM asks IAM for managed policy ARNs; offline there are none to give."""

    def load(self):
        return {}


def lint(path: str, what: str) -> list[str]:
    """cfn-lint errors are problems; its warnings are printed. (On the
    translated template it warns that the existing-stream parameter's empty
    default is no ARN, in the branch that creates the table instead.)"""
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "cfn-lint"), "--format", "parseable", path],
        capture_output=True,
        text=True,
    )
    findings = [line for line in out.stdout.splitlines() if line.strip()]
    errors = [line for line in findings if ":E" in line]
    for line in findings:
        if line not in errors:
            print(f"cfn-lint {what}: {line}")
    failed = out.returncode & 1 or (out.returncode & 2 and not errors)
    return [f"cfn-lint {what}: {line}" for line in errors] + (
        [f"cfn-lint {what} failed ({out.returncode}): {out.stderr}"] if failed else []
    )


def translate(template: dict) -> dict:
    template = copy.deepcopy(template)
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            # What `sam build` / `sam deploy` put there: the uploaded zip.
            resource["Properties"]["CodeUri"] = "s3://bucket/key.zip"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return transform(template, {}, StubPolicyLoader())


def resources_of(value) -> list:
    """The resources a statement names, through `Fn::If` branches."""
    if isinstance(value, list):
        return [r for item in value for r in resources_of(item)]
    if isinstance(value, dict) and "Fn::If" in value:
        return resources_of(value["Fn::If"][1]) + resources_of(value["Fn::If"][2])
    return [value]


def conditional(items: list) -> list:
    """List items with each `Fn::If` replaced by its branches (no `AWS::NoValue`)."""
    out = []
    for item in items:
        if isinstance(item, dict) and "Fn::If" in item:
            out += [b for b in item["Fn::If"][1:] if b != {"Ref": "AWS::NoValue"}]
        else:
            out.append(item)
    return out


def client_policy_problems(cfn: dict) -> list[str]:
    """Each client policy grants its own set, on the table and its indexes
    only; the acquire policy writes bucket items only."""
    problems = []
    table = ALLOWED_RESOURCES[:2] + ALLOWED_RESOURCES[3:5]
    for name, allowed in CLIENT_POLICIES.items():
        resource = cfn["Resources"].get(name)
        if not resource or resource["Type"] != "AWS::IAM::ManagedPolicy":
            problems.append(f"{name}: no such managed policy")
            continue
        granted = set()
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            granted |= set(actions)
            for target in resources_of(statement["Resource"]):
                if target not in table:
                    problems.append(f"{name}: resource {json.dumps(target)} is not the table or its indexes")
            leading = statement.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
            if name == "AcquireOnlyPolicy" and WRITES & set(actions) and leading != ["*/BUCKET#*"]:
                problems.append(f"{name}: writes not limited to bucket items")
        if granted != allowed:
            problems.append(f"{name}: grants {sorted(granted)}, not {sorted(allowed)}")
    return problems


def dashboard_problems(cfn: dict) -> list[str]:
    """The dashboard's body, its variables filled in, is JSON; every metric it
    shows from the aggregator's namespace is one the aggregator emits."""
    body, variables = cfn["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    text = re.sub(r"\$\{[^}]+\}", "X", body)
    try:
        widgets = json.loads(text)["widgets"]
    except (ValueError, KeyError) as e:
        return [f"the dashboard body is not JSON with widgets: {e}"]
    emitted = set()
    for path in ("aggregator/src/metrics/mod.rs", "aggregator/src/plan/overdraw.rs",
                 "cfn-limits-resource/src/metrics.rs"):
        with open(os.path.join(ROOT, path)) as f:
            emitted |= set(re.findall(r'"([A-Z][A-Za-z]+)"', f.read()))
    shown = set(re.findall(r'MetricName=\\"([A-Za-z]+)\\"', body))
    for widget in widgets:
        for row in widget["properties"]["metrics"]:
            if isinstance(row[0], str) and row[0] == "X":
                shown.add(row[1])
    problems = [f"the dashboard shows {m}, which the aggregator never emits" for m in sorted(shown - emitted)]
    for wanted in ("SoftLimitOverdrawn", "RecordsProcessed", "RecordsSkipped", "ResourceUtilization",
                   "AdaptiveFactor", "ControllerTicks", "ControllerBlind", "CanaryLag", "StampingBehind",
                   "NamespaceTicksFailed", "ArchiveSkipped", "PropagationsFailed", "StreamBatchDuration",
                   "FollowUpsFailed", "SaturatedEntities", "RaisedEntities", "DemandOverflow"):
        if wanted not in shown:
            problems.append(f"the dashboard does not show {wanted}")
    if "IteratorAge" not in body or '"Errors"' not in body:
        problems.append("the dashboard shows no iterator age or errors")
    return problems


def policy_problems(cfn: dict) -> list[str]:
    problems = []
    for name, resource in cfn["Resources"].items():
        if resource["Type"] not in ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        if name in CLIENT_POLICIES:
            continue
        props = resource["Properties"]
        if props.get("ManagedPolicyArns"):
            problems.append(f"{name}: managed policies {props['ManagedPolicyArns']} are not least privilege")
        documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
        if "PolicyDocument" in props:
            documents.append(props["PolicyDocument"])
        for document in documents:
            for statement in conditional(document["Statement"]):
                if statement.get("Effect") != "Allow":
                    continue
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                for action in actions:
                    if "*" in action or action not in ALLOWED_ACTIONS:
                        problems.append(f"{name}: action {action} is not one the code calls")
                    leading = statement.get("Condition", {}).get("ForAllValues:StringLike", {}) \
                        .get("dynamodb:LeadingKeys")
                    if name == "AggregatorRole" and action == "dynamodb:DeleteItem" and (
                        leading != ["*/ADAPTIVE#"] or actions != ["dynamodb:DeleteItem"]
                    ):
                        problems.append(f"{name}: DeleteItem beyond the adaptive partitions ({{ns}}/ADAPTIVE#)")
                    if action == "lambda:InvokeFunction" and (
                        name != "ProvisionerRole" or statement["Resource"] != ALLOWED_RESOURCES[-1]
                    ):
                        problems.append(f"{name}: lambda:InvokeFunction on anything but the provisioner itself")
                for target in resources_of(statement.get("Resource", "*")):
                    if target not in ALLOWED_RESOURCES:
                        problems.append(f"{name}: resource {json.dumps(target)} is broader than the table, its indexes and stream, the queue and the logs")
    return problems


# What each function's code calls, all of which its role must grant (the
# other direction of ALLOWED_ACTIONS). A TransactWriteItems is authorised per
# item, and a condition check in one (`TxWrite::Check`: the aggregator's
# repair and clones, the provisioner's adaptive lap) needs ConditionCheckItem.
NEEDED_ACTIONS = {
    "ProvisionerRole": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                        "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:ConditionCheckItem",
                        "lambda:InvokeFunction", "sqs:SendMessage"},
    "AggregatorRole": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                       "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:ConditionCheckItem",
                       "dynamodb:DescribeTable", "dynamodb:DescribeStream", "dynamodb:GetRecords",
                       "dynamodb:GetShardIterator", "dynamodb:ListStreams", "s3:PutObject"},
}


def needed_problems(cfn: dict) -> list[str]:
    problems = []
    for name, needed in NEEDED_ACTIONS.items():
        granted = set()
        for policy in cfn["Resources"][name]["Properties"].get("Policies", []):
            for statement in conditional(policy["PolicyDocument"]["Statement"]):
                if statement.get("Effect") == "Allow":
                    action = statement["Action"]
                    granted |= set(action if isinstance(action, list) else [action])
        if needed - granted:
            problems.append(f"{name}: lacks what its code calls: {sorted(needed - granted)}")
    return problems


def shape_problems(cfn: dict) -> list[str]:
    problems = []
    functions = {n: r for n, r in cfn["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
    for name in ("Aggregator", "Provisioner"):
        props = functions[name]["Properties"]
        tags = {t["Key"]: t["Value"] for t in props.get("Tags", [])}
        if tags.get("zae-limiter:lambda-version") != LAMBDA_VERSION:
            problems.append(f"{name}: tag zae-limiter:lambda-version is {tags.get('zae-limiter:lambda-version')!r}")
        if props["Runtime"] != "provided.al2023" or props["Handler"] != "bootstrap":
            problems.append(f"{name}: not a provided.al2023 bootstrap function")
    mappings = [r["Properties"] for r in cfn["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    if len(mappings) != 1:
        return problems + [f"expected one event source mapping, found {len(mappings)}"]
    mapping = mappings[0]
    for key, want in (
        ("FunctionResponseTypes", ["ReportBatchItemFailures"]),
        ("BisectBatchOnFunctionError", True),
    ):
        if mapping.get(key) != want:
            problems.append(f"event source mapping: {key} is {mapping.get(key)!r}")
    for key in ("MaximumRetryAttempts", "MaximumRecordAgeInSeconds"):
        if not isinstance(mapping.get(key), int) or mapping[key] < 0:
            problems.append(f"event source mapping: {key} must be bounded")
    if "OnFailure" not in mapping.get("DestinationConfig", {}):
        problems.append("event source mapping: no on-failure destination")
    # Follow-ups: bounded retries and a queue, on their alias only (never on
    # the bare function CloudFormation invokes with a pre-signed URL).
    configs = [r["Properties"] for r in cfn["Resources"].values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"
               and r["Properties"]["FunctionName"] == {"Ref": "Provisioner"}]
    env = functions["Provisioner"]["Properties"]["Environment"]["Variables"]
    if len(configs) != 1 or configs[0].get("Qualifier") != env.get("FOLLOW_UP_ALIAS") \
            or not isinstance(configs[0].get("MaximumRetryAttempts"), int) \
            or "OnFailure" not in configs[0].get("DestinationConfig", {}):
        problems.append("follow-ups need bounded retries and a failure queue on their own alias")
    filters = mapping["FilterCriteria"]["Filters"]
    always = [json.loads(f["Pattern"]) for f in filters if "Pattern" in f]
    archiving = [f["Fn::If"] for f in filters if "Fn::If" in f]
    state = {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"Keys": {"SK": {"S": ["#STATE"]}}}}
    with open(os.path.join(ROOT, "aggregator/filter-criteria.json")) as f:
        poller = [json.loads(p["Pattern"]) for p in json.load(f)["Filters"]]
    with open(os.path.join(ROOT, "aggregator/archive-filter-criteria.json")) as f:
        audit = [json.loads(p["Pattern"]) for p in json.load(f)["Filters"]]
    if always != [state] or poller != [state]:
        # Only bucket changes, unless the archive is on: no invocations for nothing.
        problems.append(f"the #STATE filter differs from aggregator/filter-criteria.json, or more passes: {always}")
    if len(archiving) != 1 or archiving[0][0] != "ArchiveAudit" or archiving[0][2] != {"Ref": "AWS::NoValue"} \
            or [json.loads(archiving[0][1]["Pattern"])] != audit:
        problems.append(f"audit removals must pass exactly when the archive is on, as in aggregator/archive-filter-criteria.json: {archiving}")
    bucket = cfn["Resources"].get("AuditArchiveBucket", {}).get("Properties", {})
    block = bucket.get("PublicAccessBlockConfiguration", {})
    if not bucket.get("BucketEncryption") or not all(block.get(k) for k in
            ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")) \
            or not bucket.get("LifecycleConfiguration"):
        problems.append("the audit archive bucket must be encrypted, closed to the public and expire its objects")
    rules = bucket.get("LifecycleConfiguration", {}).get("Rules", [])
    if bucket.get("VersioningConfiguration") != {"Status": "Enabled"} or \
            not all(r.get("NoncurrentVersionExpiration") for r in rules):
        problems.append("the audit archive bucket must keep versions and expire the noncurrent ones")
    lock = bucket.get("ObjectLockConfiguration", {})
    if not (isinstance(lock, dict) and lock.get("Fn::If", [None])[0] == "ArchiveLocked"):
        problems.append("the archive's Object Lock must be optional (condition ArchiveLocked)")
    alarms = [r["Properties"] for r in cfn["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    metrics = {a["MetricName"] for a in alarms}
    for metric in ("SoftLimitOverdrawn", "IteratorAge", "Errors", "ApproximateNumberOfMessagesVisible",
                   "RecordsSkipped", "UsageSkipped", "DestinationDeliveryFailures", "ControllerTicks",
                   "ControllerBlind", "ArchiveSkipped", "FollowUpsFailed", "StreamBatchDuration",
                   "ReadThrottleEvents", "WriteThrottleEvents"):
        if metric not in metrics:
            problems.append(f"no alarm on {metric}")
    errors_of = {json.dumps(a.get("Dimensions"), sort_keys=True) for a in alarms if a["MetricName"] == "Errors"}
    if len(errors_of) < 2:
        problems.append("not both functions' Errors have an alarm")
    exports = {o.get("Export", {}).get("Name", {}).get("Fn::Sub") for o in cfn["Outputs"].values()}
    for name in ("ProvisionerArn", "TableName", "TableArn", "StreamArn", "DLQArn",
                 "AcquireOnlyPolicyArn", "FullAccessPolicyArn", "ReadOnlyPolicyArn"):
        if f"${{AWS::StackName}}-{name}" not in exports:
            problems.append(f"no export <stack>-{name}")
    return problems + parameter_problems(cfn)


def version_problems(cfn: dict) -> list[str]:
    """The template's copies of the build's version against Cargo.toml's (the tags: shape_problems)."""
    problems = []
    output = cfn["Outputs"].get("Version", {})
    # Its description is description_problems' check, as every output's.
    if output.get("Value") != BUILD_VERSION:
        problems.append(f"output Version is {output.get('Value')!r} (Cargo.toml: {BUILD_VERSION})")
    init = cfn["Resources"]["TableInit"]["Properties"].get("Version")
    if init != BUILD_VERSION:
        problems.append(f"TableInit's Version is {init!r} (Cargo.toml: {BUILD_VERSION})")
    return problems


def parameter_problems(cfn: dict) -> list[str]:
    """The operator's parameters reach what they name: both functions'
    architecture, memory and log level, both roles' permissions boundary, and
    the table initialisation's namespaces."""
    problems = []
    params = cfn["Parameters"]
    if set(params["Architecture"]["AllowedValues"]) != {"x86_64", "arm64"} or \
            "NOT built or tested" not in params["Architecture"]["Description"]:
        problems.append("Architecture: x86_64 and arm64, saying arm64 is not tested")
    for name, memory in (("Aggregator", "AggregatorMemorySize"), ("Provisioner", "ProvisionerMemorySize")):
        props = cfn["Resources"][name]["Properties"]
        if props["Architectures"] != [{"Ref": "Architecture"}] or props["MemorySize"] != {"Ref": memory}:
            problems.append(f"{name}: architecture or memory not from the parameters")
        if props["Environment"]["Variables"].get("RUST_LOG") != {"Ref": "LogLevel"}:
            problems.append(f"{name}: RUST_LOG is not the LogLevel parameter")
    for role in ("AggregatorRole", "ProvisionerRole"):
        boundary = cfn["Resources"][role]["Properties"].get("PermissionsBoundary")
        if boundary != {"Fn::If": ["HasPermissionsBoundary", {"Ref": "PermissionsBoundary"}, {"Ref": "AWS::NoValue"}]}:
            problems.append(f"{role}: no PermissionsBoundary from the parameter")
    init = cfn["Resources"].get("TableInit", {})
    if init.get("Type") != "Custom::ZaeLimiterTable" or \
            init["Properties"].get("Namespaces") != {"Ref": "Namespaces"} or \
            init["Properties"].get("ServiceToken") != {"Fn::GetAtt": ["Provisioner", "Arn"]}:
        problems.append("TableInit: the provisioner must initialise the table with the Namespaces parameter")
    return problems


def description_problems(template: dict) -> list[str]:
    """Every parameter and output says what it is: operators read them in
    the console and in `sam deploy --guided`."""
    problems = []
    for section in ("Parameters", "Outputs"):
        for name, entry in template.get(section, {}).items():
            if not str(entry.get("Description", "")).strip():
                problems.append(f"{section}.{name}: no Description")
    return problems


def parameter_refusal(template: dict, name: str, value: str) -> bool:
    """Whether CloudFormation refuses VALUE for parameter NAME by its own
    AllowedValues / AllowedPattern (the pattern must match all of it)."""
    spec = template["Parameters"][name]
    if "AllowedValues" in spec and value not in [str(v) for v in spec["AllowedValues"]]:
        return True
    return "AllowedPattern" in spec and re.fullmatch(spec["AllowedPattern"], value) is None


def evaluate(node, params: dict):
    """The rule functions the template uses, as CloudFormation defines them."""
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Ref":
            return params[arg]
        if fn == "Fn::Contains":
            return evaluate(arg[1], params) in [evaluate(x, params) for x in arg[0]]
        if fn == "Fn::Not":
            return not evaluate(arg[0], params)
        if fn == "Fn::Equals":
            return evaluate(arg[0], params) == evaluate(arg[1], params)
        if fn in ("Fn::And", "Fn::Or"):
            values = [evaluate(x, params) for x in arg]
            return all(values) if fn == "Fn::And" else any(values)
        raise ValueError(f"rule function {fn} is not modelled here")
    return node


def rule_refusals(template: dict, params: dict) -> list[str]:
    """The rules' refusals for `params`, the others at their defaults."""
    defaults = {name: str(spec.get("Default", "")) for name, spec in template["Parameters"].items()}
    params = defaults | params
    refused = []
    for name, rule in template.get("Rules", {}).items():
        if "RuleCondition" in rule and not evaluate(rule["RuleCondition"], params):
            continue
        refused += [f"{name}: {a['AssertDescription']}" for a in rule["Assertions"] if not evaluate(a["Assert"], params)]
    return refused


def existing_table_problems(template: dict) -> list[str]:
    """ExistingTableName and ExistingTableStreamArn: both or neither."""
    arn = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000"
    problems = []
    for name, stream, admitted in (("", "", True), ("t", arn, True), ("t", "", False), ("", arn, False)):
        got = not rule_refusals(template, {"ExistingTableName": name, "ExistingTableStreamArn": stream})
        if got != admitted:
            problems.append(f"ExistingTableName={name!r} ExistingTableStreamArn={stream!r}: admitted is {got}")
    return problems


def ttl_problems(template: dict) -> list[str]:
    """Every TTL the parameters admit covers the longest window chosen (the
    aggregator's Window::longest_days: 31 for monthly, 1 otherwise), and
    every TTL that covers it is admitted."""
    problems = []
    for bad in ("0", "030", "30.5", "3651", "", "-1", "90 "):
        if not parameter_refusal(template, "SnapshotTtlDays", bad):
            problems.append(f"SnapshotTtlDays admits {bad!r}")
    for windows in template["Parameters"]["SnapshotWindows"]["AllowedValues"]:
        needed = 31 if "monthly" in windows.split(",") else 1
        for days in list(range(1, 45)) + [3650]:
            ttl = str(days)
            admitted = not parameter_refusal(template, "SnapshotTtlDays", ttl) and not rule_refusals(
                template, {"SnapshotWindows": windows, "SnapshotTtlDays": ttl})
            if admitted != (days >= needed):
                problems.append(f"SnapshotWindows={windows} SnapshotTtlDays={ttl}: admitted is {admitted}")
    return problems


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "template.yaml")
    with open(path) as f:
        template = yaml_parse(f.read())
    problems = lint(path, "template.yaml")
    cfn = translate(template)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfn, f, indent=1)
        translated = f.name
    try:
        problems += lint(translated, "translated")
    finally:
        os.unlink(translated)
    problems += lint(os.path.join(ROOT, "examples/tenant-limits.yaml"), "examples/tenant-limits.yaml")
    problems += policy_problems(cfn)
    problems += client_policy_problems(cfn)
    problems += dashboard_problems(cfn)
    problems += shape_problems(cfn)
    problems += version_problems(cfn)
    problems += needed_problems(cfn)
    problems += ttl_problems(template)
    problems += existing_table_problems(template)
    problems += description_problems(template)
    undescribed = copy.deepcopy(template)
    next(iter(undescribed["Outputs"].values())).pop("Description", None)
    if not description_problems(undescribed):
        problems.append("the description check accepted an output without one")

    broadened = copy.deepcopy(cfn)
    role = broadened["Resources"]["ProvisionerRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    role["Statement"][0]["Resource"] = "*"
    if not policy_problems(broadened):
        problems.append("the policy check accepted a statement on every resource")
    writing = copy.deepcopy(cfn)
    writing["Resources"]["ReadOnlyPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]["Action"].append("dynamodb:PutItem")
    unconditioned = copy.deepcopy(cfn)
    del unconditioned["Resources"]["AcquireOnlyPolicy"]["Properties"]["PolicyDocument"]["Statement"][1]["Condition"]
    deleting = copy.deepcopy(cfn)
    statements = deleting["Resources"]["AggregatorRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    for statement in conditional(statements):
        if "Condition" in statement and statement.get("Action") == "dynamodb:DeleteItem":
            del statement["Condition"]
    for field in ("output", "TableInit"):
        stale = copy.deepcopy(cfn)
        if field == "output":
            stale["Outputs"].setdefault("Version", {})["Value"] = "0.1.0"
        else:
            stale["Resources"]["TableInit"]["Properties"]["Version"] = "0.1.0"
        if not version_problems(stale):
            problems.append(f"the version check accepted a stale {field} version")
    if not policy_problems(deleting):
        problems.append("the policy check accepted the aggregator deleting anywhere in the table")
    for broken, what in ((writing, "a read-only policy that writes"), (unconditioned, "acquire writes beyond buckets")):
        if not client_policy_problems(broken):
            problems.append(f"the client policy check accepted {what}")

    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"template checks passed: cfn-lint (SAM and translated), {len(cfn['Resources'])} resources, IAM least privilege and every action the code calls, snapshot TTL rule, the existing table with its stream, every parameter and output described")


if __name__ == "__main__":
    main()
