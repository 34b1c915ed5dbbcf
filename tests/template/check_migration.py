"""Checks the migration of a 0.17.0 Python stack (scripts/migrate.py, the
runbook in docs/deploy.md) without AWS, on the template the 0.17.0 wheel
itself deploys:

  * cfn-lint passes on the original and on the patched template;
  * the patch changes only the provisioner function's runtime, handler,
    architecture, code and description, one added inline policy on its role,
    and the template's metadata: its FunctionName, every other resource and
    every output and export (the tenant stacks' ServiceToken) are unchanged;
  * the patched role grants every action this project's provisioner role
    grants (what the swapped code calls), on the function itself for invokes;
  * a template that is not a 0.17.0 stack's, or one already patched, is refused.

    check_migration.py      exit 0 when every check passes
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import migrate  # noqa: E402

import zae_limiter  # noqa: E402

PYTHON_TEMPLATE = os.path.join(os.path.dirname(zae_limiter.__file__), "infra", "cfn_template.yaml")
ALLOWED = {
    ("Resources", "ProvisionerFunction", "Properties", "Runtime"),
    ("Resources", "ProvisionerFunction", "Properties", "Handler"),
    ("Resources", "ProvisionerFunction", "Properties", "Architectures"),
    ("Resources", "ProvisionerFunction", "Properties", "Code"),
    ("Resources", "ProvisionerFunction", "Properties", "Description"),
    ("Resources", "ProvisionerRole", "Properties", "Policies"),
    ("Metadata", "ZaeRsMigration"),
}


def lint(path: str) -> list:
    run = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "cfn-lint"), "--format", "parseable", path],
        capture_output=True, text=True)
    # Errors only: E-codes (warnings are W, informational I).
    return [line for line in run.stdout.splitlines() if ":E" in line]


def changed(a, b, path=()):
    """Paths where two JSON trees differ, cut at the first differing level."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += changed(a.get(key), b.get(key), path + (key,))
        return out
    return [] if a == b else [path]


def actions(statements) -> set:
    out = set()
    for s in statements:
        act = s.get("Action")
        out |= set(act if isinstance(act, list) else [act])
    return out


class _Tagged(yaml.SafeLoader):
    pass


_Tagged.add_multi_constructor("!", lambda loader, suffix, node: None)


def our_provisioner_actions() -> set:
    with open(os.path.join(ROOT, "template.yaml")) as f:
        ours = yaml.load(f, Loader=_Tagged)
    statements = [s for p in ours["Resources"]["ProvisionerRole"]["Properties"]["Policies"]
                  for s in p["PolicyDocument"]["Statement"]]
    # Log writes go to the function's own log group, granted by either stack.
    # The follow-ups' failure queue belongs to our stack's alias; a migrated
    # stack has neither (no FOLLOW_UP_ALIAS: follow-ups invoke the function).
    return {a for a in actions(statements) if not a.startswith("logs:") and a != "sqs:SendMessage"}


def main() -> int:
    problems = []
    with open(PYTHON_TEMPLATE) as f:
        original = migrate.load(f.read())
    patched = migrate.patch(original, "zae-rs-artifacts", "provisioner/bootstrap.zip")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "patched.json")
        with open(path, "w") as f:
            json.dump(patched, f)
        for name, p in (("original", PYTHON_TEMPLATE), ("patched", path)):
            errors = lint(p)
            if errors:
                problems.append(f"cfn-lint on the {name} 0.17.0 template: {errors}")
    for path in changed(original, patched):
        # Within an allowed change, or a section the original lacked.
        if not any(path[:len(a)] == a or a[:len(path)] == path for a in ALLOWED):
            problems.append(f"the patch changed {'.'.join(map(str, path))}")
    props = patched["Resources"]["ProvisionerFunction"]["Properties"]
    if props["FunctionName"] != original["Resources"]["ProvisionerFunction"]["Properties"]["FunctionName"]:
        problems.append("the function's name changed: its ARN, and the tenant stacks' ServiceToken, with it")
    if (props["Runtime"], props["Handler"]) != ("provided.al2023", "bootstrap"):
        problems.append(f"runtime and handler: {props['Runtime']}, {props['Handler']}")
    if patched["Outputs"] != original["Outputs"]:
        problems.append("outputs or exports changed")
    role = patched["Resources"]["ProvisionerRole"]["Properties"]["Policies"]
    granted = actions(s for p in role for s in p["PolicyDocument"]["Statement"])
    missing = our_provisioner_actions() - granted
    if missing:
        problems.append(f"the patched role lacks what the provisioner calls: {sorted(missing)}")
    for refused, why in ((patched, "an already patched template"), ({"Resources": {}}, "a template without the function")):
        try:
            migrate.patch(refused, "zae-rs-artifacts", "k")
            problems.append(f"patched {why}")
        except migrate.Refused:
            pass
    for p in problems:
        print(f"migration check: {p}", file=sys.stderr)
    if not problems:
        print("migration checks passed: cfn-lint on the 0.17.0 template before and after, "
              "in-place provisioner swap only, outputs unchanged, role covers the provisioner")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
