"""Stand-in stacks for the smoke test (scripts/smoke.sh) on moto, whose
Lambda needs Docker and so cannot run our functions.

    smoke_stack.py create --stack S --table T [--adaptive enabled|disabled]
        the table from template.yaml's schema (stack_table.py), then a stack
        with template.yaml's Parameters (the same names, types and defaults)
        and an output of each of its Outputs' names: TableName is T,
        AggregatorName S-aggregator, the others placeholders. Its one
        resource is a WaitConditionHandle: the test runs the aggregator itself.
    smoke_stack.py foreign --stack S
        a stack that is not ours: no such outputs or parameters

Endpoint and credentials come from the AWS environment (AWS_ENDPOINT_URL, ...).
"""
import argparse
import json

import boto3
import yaml

from client import endpoint, region
from stack_table import TEMPLATE, _Tagged, create as create_table

PLACEHOLDER = {"Type": "AWS::CloudFormation::WaitConditionHandle"}


def stand_in(stack: str, table: str, adaptive: str) -> dict:
    with open(TEMPLATE) as f:
        template = yaml.load(f, Loader=_Tagged)
    outputs = {name: {"Value": f"stand-in: moto runs no {name}"} for name in template["Outputs"]}
    outputs["TableName"] = {"Value": table}
    outputs["AggregatorName"] = {"Value": f"{stack}-aggregator"}
    body = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "stand-in of template.yaml for the smoke test on moto",
        "Parameters": template["Parameters"],
        "Resources": {"StandIn": PLACEHOLDER},
        "Outputs": outputs,
    }
    params = [{"ParameterKey": "AdaptiveLimits", "ParameterValue": adaptive}]
    return create_stack(stack, body, params)


def foreign(stack: str) -> dict:
    body = {"Resources": {"Something": PLACEHOLDER}, "Outputs": {"BucketName": {"Value": "not-ours"}}}
    return create_stack(stack, body, [])


def create_stack(stack: str, body: dict, params: list) -> dict:
    cfn = boto3.client("cloudformation", endpoint_url=endpoint(), region_name=region())
    cfn.create_stack(StackName=stack, TemplateBody=json.dumps(body), Parameters=params)
    status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
    return {"stack": stack, "status": status}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["create", "foreign"])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--table")
    parser.add_argument("--adaptive", choices=["enabled", "disabled"], default="enabled")
    args = parser.parse_args()
    if args.command == "create":
        create_table(args.table)
        out = stand_in(args.stack, args.table, args.adaptive)
    else:
        out = foreign(args.stack)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
