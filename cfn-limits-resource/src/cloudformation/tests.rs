use super::*;

fn envelope(kind: &'static str, physical: Option<&str>) -> Envelope {
    Envelope {
        kind,
        resource_type: "Custom::ZaeLimiterLimits".into(),
        request_id: "req-1".into(),
        response_url: "http://127.0.0.1:9/response".into(),
        stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/1".into(),
        logical_resource_id: "TenantLimits".into(),
        physical_resource_id: physical.map(str::to_owned),
        properties: Tree::Null,
        old_properties: Tree::Null,
    }
}

#[test]
fn a_failed_create_answers_with_a_marker_id() {
    let outcome = Outcome::failed(&envelope("Create", None), "bad manifest");
    assert_eq!(outcome.physical_id, "failed-create/req-1");
    let update = Outcome::failed(&envelope("Update", Some("t/ns/limits-provisioner")), "x");
    assert_eq!(update.physical_id, "t/ns/limits-provisioner");
}

#[test]
fn bodies_never_exceed_what_cloudformation_accepts() {
    let env = envelope("Update", Some("t/ns/limits-provisioner"));
    let changes: Vec<Value> = (0..2000)
        .map(
            |i| json!({"action": "update", "level": "entity", "target": format!("user-{i}/gpt-4")}),
        )
        .collect();
    let errors: Vec<String> = (0..200)
        .map(|i| format!("error number {i} {}", "x".repeat(80)))
        .collect();
    let outcome = Outcome {
        success: true,
        reason: "r".repeat(10_000),
        physical_id: "t/ns/limits-provisioner".into(),
        data: json!({"status": "applied", "changes": changes, "errors": errors, "created": 0}),
        follow_up: None,
    };
    let body = outcome.body(&env);
    assert!(body.len() <= MAX_RESPONSE_BYTES, "{} bytes", body.len());
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["Status"], "SUCCESS");
    assert_eq!(parsed["PhysicalResourceId"], "t/ns/limits-provisioner");
    assert_eq!(parsed["Data"]["created"], 0);
    let kept = parsed["Data"]["changes"].as_array().map_or(0, Vec::len) as u64;
    let omitted = parsed["Data"]["changes_omitted"].as_u64().unwrap();
    assert_eq!(kept + omitted, 2000);

    let small = Outcome::failed(&env, "bad").body(&env);
    let parsed: Value = serde_json::from_str(&small).unwrap();
    assert_eq!(parsed["Reason"], "bad");
    assert_eq!(parsed["Status"], "FAILED");
}

#[test]
fn requests_parse_with_their_properties_in_order() {
    let text = r#"{
        "RequestType": "Update",
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:t-limits-provisioner",
        "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x?sig=1",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/1",
        "RequestId": "req-2",
        "LogicalResourceId": "TenantLimits",
        "PhysicalResourceId": "t/ns/limits-provisioner",
        "ResourceType": "Custom::ZaeLimiterLimits",
        "ResourceProperties": {"ServiceToken": "x", "Namespace": "tenant",
            "Resources": {"gpt-4": {"Limits": {"tpm": {"Capacity": "10"}, "rpm": {"Capacity": "5"}}}}},
        "OldResourceProperties": {"ServiceToken": "x"}
    }"#;
    let tree: Tree = serde_json::from_str(text).unwrap();
    let request: Request = yaml_serde::from_value(tree).unwrap();
    let envelope = Envelope::from_request(request).unwrap();
    assert_eq!(envelope.kind, "Update");
    assert_eq!(
        envelope.owner(),
        "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/1|TenantLimits"
    );
    let manifest = parse_properties(&envelope.properties, "ns").unwrap();
    let names: Vec<&str> = manifest.resources[0]
        .1
        .limits
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["tpm", "rpm"], "declaration order survives");
    assert_eq!(table_name(&envelope, Some("env")).unwrap(), "env");
}

#[test]
fn the_tenant_stack_example_is_a_valid_manifest() {
    let template: Tree =
        yaml_serde::from_str(include_str!("../../../examples/tenant-limits.yaml")).unwrap();
    let properties = &template["Resources"]["TenantLimits"]["Properties"];
    let manifest = parse_properties(properties, "tenant").unwrap();
    let (resource, level) = &manifest.resources[0];
    assert_eq!(resource, "gpt-4");
    let soft: Vec<(&str, bool)> = level
        .limits
        .iter()
        .map(|(n, l)| (n.as_str(), l.soft))
        .collect();
    assert_eq!(soft, [("tpm", true), ("rpm", false)]);
    let (entity, levels) = &manifest.entities[0];
    assert_eq!(
        (entity.as_str(), levels[0].1.limits[1].1.capacity),
        ("big-customer", 5000)
    );
}

#[test]
fn a_body_is_returned_even_when_the_requests_own_fields_exceed_the_limit() {
    let mut env = envelope("Create", None);
    env.stack_id = "s".repeat(10_000);
    let outcome = Outcome::failed(&env, "r".repeat(5_000));
    let body = outcome.body(&env);
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["Status"], "FAILED");
    assert_eq!(parsed["Reason"], "", "every cuttable byte was cut");
}

fn table_init(kind: &'static str, physical: Option<&str>, properties: &str) -> Envelope {
    Envelope {
        resource_type: table::RESOURCE_TYPE.into(),
        logical_resource_id: "TableInit".into(),
        properties: yaml_serde::from_str(properties).unwrap(),
        ..envelope(kind, physical)
    }
}

#[tokio::test]
async fn the_table_resource_takes_namespaces_as_a_list_or_a_string_and_refuses_the_rest() {
    use zae_test_support::memory::MemoryStore;
    let store = MemoryStore::new();
    let list = table_init("Create", None, "{TableName: t, Namespaces: [default, a]}");
    let outcome = table::handle(&store, &list, "t", 1_000).await.unwrap();
    assert_eq!(outcome.physical_id, "t/table");
    assert!(
        outcome
            .reason
            .contains("2 namespace(s) registered (default, a)")
    );
    let text = table_init("Update", Some("t/table"), "{Namespaces: ' a , b ,'}");
    let outcome = table::handle(&store, &text, "t", 2_000).await.unwrap();
    assert!(
        outcome.reason.contains("1 namespace(s) registered (b)"),
        "{}",
        outcome.reason
    );
    assert_eq!(outcome.data["NamespaceIds"].as_object().unwrap().len(), 2);
    for (properties, says) in [
        ("{Namespaces: 3}", "Namespaces: must be a list"),
        ("{Namespaces: ''}", "names no namespace"),
        ("{Namespaces: [_]}", "reserved"),
        ("{Namespace: default}", "unknown property 'Namespace'"),
    ] {
        let err = table::handle(&store, &table_init("Create", None, properties), "t", 3_000)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(says), "{properties}: {err}");
    }
}

#[tokio::test]
async fn the_table_resource_deletes_nothing_and_only_unstamps_its_own_table() {
    use zae_test_support::memory::MemoryStore;
    let store = MemoryStore::new();
    let create = table_init("Create", None, "{Namespaces: [default]}");
    table::handle(&store, &create, "t", 1_000).await.unwrap();
    let before = store.items().len();
    let foreign = table_init("Delete", Some("failed-create/r"), "{}");
    let outcome = table::handle(&store, &foreign, "t", 2_000).await.unwrap();
    assert!(
        outcome.reason.contains("never initialised"),
        "{}",
        outcome.reason
    );
    let own = table_init("Delete", Some("t/table"), "{}");
    let outcome = table::handle(&store, &own, "t", 3_000).await.unwrap();
    assert!(
        outcome.success && outcome.reason.contains("back to"),
        "{}",
        outcome.reason
    );
    assert_eq!(store.items().len(), before, "the namespaces stay");
}

/// Issue 28, item 7: a second stack's `TableInit` on a table the first
/// stack's stamp owns fails before it registers anything.
#[tokio::test]
async fn a_second_stacks_table_resource_registers_nothing_in_the_firsts_table() {
    use zae_test_support::memory::MemoryStore;
    let store = MemoryStore::new();
    let first = table_init("Create", None, "{Namespaces: [default]}");
    table::handle(&store, &first, "t", 1_000).await.unwrap();
    let before = store.items();
    let second = Envelope {
        stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/second/2".into(),
        ..table_init("Create", None, "{Namespaces: [default, tenant-b]}")
    };
    let err = table::handle(&store, &second, "t", 2_000)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("stamped by"), "{err}");
    assert_eq!(store.items(), before, "tenant-b was registered");
}

/// An upgrade from a template before `Version` (its old properties lack it)
/// and the rollback back to it (the new ones lack it) are both Updates that
/// stamp this build: `Version` is never required, only allowed.
#[tokio::test]
async fn the_table_resource_takes_an_update_with_or_without_version() {
    use zae_test_support::memory::MemoryStore;
    let store = MemoryStore::new();
    let old = "{TableName: t, Namespaces: [default]}";
    table::handle(&store, &table_init("Create", None, old), "t", 1_000)
        .await
        .unwrap();
    let upgrade = Envelope {
        old_properties: yaml_serde::from_str(old).unwrap(),
        ..table_init(
            "Update",
            Some("t/table"),
            "{TableName: t, Namespaces: [default], Version: '0.8.0'}",
        )
    };
    let rollback = Envelope {
        old_properties: upgrade.properties.clone(),
        ..table_init("Update", Some("t/table"), old)
    };
    for (what, update) in [("upgrade", upgrade), ("rollback", rollback)] {
        let outcome = table::handle(&store, &update, "t", 2_000).await.unwrap();
        assert!(outcome.success, "{what}: {}", outcome.reason);
        let record = store
            .item(&zae_table::keys::pk_registry(), zae_table::keys::SK_VERSION)
            .unwrap();
        assert_eq!(
            record[zae_table::registry::LAMBDA_VERSION].as_s(),
            Some(zae_provisioner::init::LAMBDA_VERSION_STAMP),
            "{what}"
        );
    }
}
