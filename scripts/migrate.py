#!/usr/bin/env python3
"""Moving a zae-limiter 0.17.0 Python stack onto this project's Lambdas
without touching its tenant stacks (docs/deploy.md has the whole runbook).

Tenant stacks call the provisioner through `Fn::ImportValue <stack>-ProvisionerArn`,
and CloudFormation never lets a custom resource's ServiceToken change. So the
Python stack keeps its provisioner *function* (same name, same ARN, same
export) and only its runtime and code change, through CloudFormation, in place:

    migrate.py patch --template PYTHON_STACK_TEMPLATE --code-bucket B --code-key K [--out FILE]

reads the Python stack's template (YAML or JSON, as `aws cloudformation
get-template` returns it) and prints it as JSON with exactly these changes:

  * ProvisionerFunction: Runtime provided.al2023, Handler bootstrap,
    Architectures [x86_64], Code from s3://B/K (this project's
    `cfn-limits-resource` bootstrap.zip); its FunctionName is untouched, so
    the update is in place (no replacement, same ARN);
  * ProvisionerRole: two more inline policies, lambda:InvokeFunction on the
    function itself (the follow-ups of a fan-out larger than one invocation),
    and dynamodb:ConditionCheckItem on the table (the adaptive lap's stamps
    check the target's generation in their transaction; 0.17.0 never did);
  * Metadata.ZaeRsMigration: what was changed, for whoever reads the stack later.

Everything else, outputs and exports included, is left as it was. It refuses a
template that is not a 0.17.0 zae-limiter stack's, or one already patched.
The way back is the saved original template (the runbook).
"""
import argparse
import copy
import json
import sys

from cfnlint.decode import decode_str

RUNTIME, HANDLER = "provided.al2023", "bootstrap"
SELF_INVOKE = "ZaeRsProvisionerSelfInvoke"
CONDITION_CHECKS = "ZaeRsProvisionerConditionChecks"


class Refused(Exception):
    pass


def load(text: str) -> dict:
    template, matches = decode_str(text)
    if matches:
        raise Refused("the template does not parse: " + "; ".join(str(m) for m in matches))
    # cfn-lint's nodes carry positions; plain dicts and lists from here on.
    return json.loads(json.dumps(template))


def patch(template: dict, bucket: str, key: str) -> dict:
    resources = template.get("Resources") or {}
    function = resources.get("ProvisionerFunction")
    if not function or function.get("Type") != "AWS::Lambda::Function":
        raise Refused("no ProvisionerFunction (AWS::Lambda::Function): not a zae-limiter 0.17.0 stack's template")
    if function.get("Properties", {}).get("FunctionName") != {"Fn::Sub": "${AWS::StackName}-limits-provisioner"}:
        raise Refused("ProvisionerFunction is not named ${AWS::StackName}-limits-provisioner")
    if "RateLimitsTable" not in resources:
        raise Refused("no RateLimitsTable: not a zae-limiter 0.17.0 stack's template")
    if "ZaeRsMigration" in (template.get("Metadata") or {}):
        raise Refused("already patched (Metadata.ZaeRsMigration)")
    out = copy.deepcopy(template)
    props = out["Resources"]["ProvisionerFunction"]["Properties"]
    was = {"Runtime": props.get("Runtime"), "Handler": props.get("Handler")}
    props["Runtime"] = RUNTIME
    props["Handler"] = HANDLER
    props["Architectures"] = ["x86_64"]
    props["Code"] = {"S3Bucket": bucket, "S3Key": key}
    props["Description"] = "zae-limiter Custom::ZaeLimiterLimits provisioner (Rust, migrated in place)"
    role = out["Resources"].get("ProvisionerRole")
    if role and role.get("Type") == "AWS::IAM::Role":
        role["Properties"].setdefault("Policies", []).append({
            "PolicyName": SELF_INVOKE,
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{
                    "Effect": "Allow",
                    "Action": "lambda:InvokeFunction",
                    "Resource": {"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-limits-provisioner"},
                }],
            },
        })
        role["Properties"]["Policies"].append({
            "PolicyName": CONDITION_CHECKS,
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{
                    "Effect": "Allow",
                    "Action": "dynamodb:ConditionCheckItem",
                    "Resource": [{"Fn::GetAtt": ["RateLimitsTable", "Arn"]}],
                }],
            },
        })
    out.setdefault("Metadata", {})["ZaeRsMigration"] = {
        "ProvisionerFunction": {"was": was, "now": {"Runtime": RUNTIME, "Handler": HANDLER}},
        "ProvisionerRole": f"added inline policies {SELF_INVOKE}, {CONDITION_CHECKS}" if role else "none in this template",
        "Code": f"s3://{bucket}/{key}",
        "Back": "update the stack with its saved original template, then `zae-limiter deploy`",
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("patch", help="print the Python stack's template with the provisioner moved to this project's code")
    p.add_argument("--template", required=True, help="the Python stack's template (aws cloudformation get-template)")
    p.add_argument("--code-bucket", required=True, help="S3 bucket holding the cfn-limits-resource bootstrap.zip")
    p.add_argument("--code-key", required=True, help="its key")
    p.add_argument("--out", help="write here instead of stdout")
    args = parser.parse_args()
    try:
        with open(args.template) as f:
            text = f.read()
        patched = patch(load(text), args.code_bucket, args.code_key)
    except (OSError, Refused) as e:
        print(f"migrate.py: {e}", file=sys.stderr)
        return 3
    body = json.dumps(patched, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(body + "\n")
    else:
        print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
