//! Kafka's authorisation rules, one test each: super users, DENY over ALLOW, the implied
//! Describe, literal `*` and prefixed patterns, principals and hosts, the default when no ACL
//! names a resource, authorisation by resource type, and the ACLs file.

use minibroker_security::acl::{
    Acl, Acls, Authorizer, Operation, PatternType, Permission, Reason, Request, ResourceType,
};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

fn acl(line: &str) -> Acl {
    let acls = Acls::parse(line, Path::new("test")).unwrap();
    acls.iter().next().unwrap().clone()
}

fn authorizer(lines: &[&str]) -> Authorizer {
    Authorizer {
        acls: Arc::new(Acls::parse(&lines.join("\n"), Path::new("test")).unwrap()),
        ..Authorizer::default()
    }
}

fn request<'a>(principal: &'a str, operation: Operation, topic: &'a str) -> Request<'a> {
    Request {
        principal,
        host: Some(IpAddr::from([10, 0, 0, 1])),
        operation,
        resource_type: ResourceType::Topic,
        name: topic,
    }
}

#[test]
fn nothing_is_allowed_without_an_acl() {
    let none = authorizer(&[]);
    let decision = none.authorize(&request("User:alice", Operation::Read, "orders"));
    assert!(!decision.allowed);
    assert_eq!(decision.reason, Reason::NoAllow);
}

#[test]
fn an_allow_allows_its_principal_its_operation_on_its_resource_only() {
    let rules = authorizer(&["User:alice ALLOW WRITE TOPIC LITERAL orders *"]);
    let decision = rules.authorize(&request("User:alice", Operation::Write, "orders"));
    assert!(decision.allowed);
    assert_eq!(
        decision.reason,
        Reason::AllowedBy(acl("User:alice ALLOW WRITE TOPIC LITERAL orders *"))
    );
    assert!(!rules.allows(&request("User:bob", Operation::Write, "orders")));
    assert!(!rules.allows(&request("User:alice", Operation::Read, "orders")));
    assert!(!rules.allows(&request("User:alice", Operation::Write, "payments")));
    let group = Request {
        resource_type: ResourceType::Group,
        ..request("User:alice", Operation::Write, "orders")
    };
    assert!(!rules.allows(&group));
}

#[test]
fn a_deny_wins_over_any_allow() {
    let rules = authorizer(&[
        "User:* ALLOW ALL TOPIC LITERAL * *",
        "User:mallory DENY WRITE TOPIC PREFIXED pay *",
    ]);
    let decision = rules.authorize(&request("User:mallory", Operation::Write, "payments"));
    assert!(!decision.allowed);
    assert_eq!(
        decision.reason,
        Reason::DeniedBy(acl("User:mallory DENY WRITE TOPIC PREFIXED pay *"))
    );
    assert!(rules.allows(&request("User:mallory", Operation::Read, "payments")));
    assert!(rules.allows(&request("User:mallory", Operation::Write, "orders")));
    assert!(rules.allows(&request("User:alice", Operation::Write, "payments")));
}

#[test]
fn read_write_delete_and_alter_imply_describe_but_a_deny_implies_nothing() {
    for operation in ["READ", "WRITE", "DELETE", "ALTER", "ALL"] {
        let rules = authorizer(&[&format!("User:alice ALLOW {operation} TOPIC LITERAL t *")]);
        assert!(
            rules.allows(&request("User:alice", Operation::Describe, "t")),
            "{operation}"
        );
    }
    let create = authorizer(&["User:alice ALLOW CREATE TOPIC LITERAL t *"]);
    assert!(!create.allows(&request("User:alice", Operation::Describe, "t")));
    let configs = authorizer(&["User:alice ALLOW ALTER_CONFIGS TOPIC LITERAL t *"]);
    assert!(configs.allows(&request("User:alice", Operation::DescribeConfigs, "t")));
    let denied_read = authorizer(&[
        "User:alice ALLOW DESCRIBE TOPIC LITERAL t *",
        "User:alice DENY READ TOPIC LITERAL t *",
    ]);
    assert!(denied_read.allows(&request("User:alice", Operation::Describe, "t")));
    let denied_all = authorizer(&[
        "User:alice ALLOW DESCRIBE TOPIC LITERAL t *",
        "User:alice DENY ALL TOPIC LITERAL t *",
    ]);
    assert!(!denied_all.allows(&request("User:alice", Operation::Describe, "t")));
}

#[test]
fn literal_star_names_every_resource_and_a_prefix_names_those_it_begins() {
    let rules = authorizer(&[
        "User:alice ALLOW READ TOPIC LITERAL * *",
        "User:bob ALLOW READ TOPIC PREFIXED logs- *",
    ]);
    assert!(rules.allows(&request("User:alice", Operation::Read, "anything")));
    assert!(rules.allows(&request("User:bob", Operation::Read, "logs-app")));
    assert!(!rules.allows(&request("User:bob", Operation::Read, "log")));
    assert!(!rules.allows(&request("User:bob", Operation::Read, "xlogs-app")));
}

#[test]
fn an_acl_for_one_host_applies_to_that_address_only() {
    let rules = authorizer(&["User:alice ALLOW READ TOPIC LITERAL t 10.0.0.1"]);
    assert!(rules.allows(&request("User:alice", Operation::Read, "t")));
    let elsewhere = Request {
        host: Some(IpAddr::from([10, 0, 0, 2])),
        ..request("User:alice", Operation::Read, "t")
    };
    assert!(!rules.allows(&elsewhere));
}

#[test]
fn an_ipv4_host_and_its_ipv4_mapped_ipv6_form_are_one_host() {
    let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
    for (acl, client) in [
        ("10.0.0.1", mapped),
        ("::ffff:10.0.0.1", IpAddr::from([10, 0, 0, 1])),
    ] {
        let rules = authorizer(&[
            &format!("User:alice DENY READ TOPIC LITERAL t {acl}"),
            "User:alice ALLOW READ TOPIC LITERAL t *",
        ]);
        let from = Request {
            host: Some(client),
            ..request("User:alice", Operation::Read, "t")
        };
        assert!(!rules.allows(&from), "{acl} against {client}");
    }
}

#[test]
fn super_users_are_allowed_everything_even_what_is_denied() {
    let mut rules = authorizer(&["User:* DENY ALL TOPIC LITERAL * *"]);
    rules.super_users = Arc::new(vec!["User:admin".into()]);
    let decision = rules.authorize(&request("User:admin", Operation::Delete, "t"));
    assert_eq!(decision.reason, Reason::SuperUser);
    assert!(!rules.allows(&request("User:alice", Operation::Read, "t")));
}

#[test]
fn allow_everyone_if_no_acl_found_opens_only_resources_no_acl_names() {
    let mut rules = authorizer(&["User:alice ALLOW READ TOPIC LITERAL guarded *"]);
    rules.allow_everyone_if_no_acl_found = true;
    let open = rules.authorize(&request("User:bob", Operation::Write, "open"));
    assert_eq!(open.reason, Reason::NoAclForResource);
    assert!(open.allowed);
    assert!(!rules.allows(&request("User:bob", Operation::Read, "guarded")));
}

#[test]
fn write_on_any_topic_counts_unless_a_deny_covers_it() {
    let rules = authorizer(&[
        "User:alice ALLOW WRITE TOPIC PREFIXED orders *",
        "User:bob ALLOW WRITE TOPIC LITERAL pay *",
        "User:bob DENY WRITE TOPIC PREFIXED pa *",
        "User:carol ALLOW READ TOPIC LITERAL * *",
    ]);
    let any = |principal| rules.allows_any(principal, None, Operation::Write, ResourceType::Topic);
    assert!(any("User:alice"));
    assert!(!any("User:bob"));
    assert!(!any("User:carol"));
}

#[test]
fn the_acls_file_round_trips_and_a_bad_line_is_an_error_naming_it() {
    let text = "# comment\nUser:alice ALLOW WRITE TOPIC LITERAL orders *\n\nUser:bob DENY idempotent-write CLUSTER LITERAL kafka-cluster 127.0.0.1\n";
    let acls = Acls::parse(text, Path::new("acls")).unwrap();
    assert_eq!(acls.len(), 2);
    assert_eq!(
        Acls::parse(&acls.to_text(), Path::new("acls")).unwrap(),
        acls
    );
    let bob = acls.iter().find(|a| a.principal == "User:bob").unwrap();
    assert_eq!(bob.operation, Operation::IdempotentWrite);
    assert_eq!(bob.permission, Permission::Deny);
    assert_eq!(bob.pattern_type, PatternType::Literal);
    for (bad, says) in [
        ("alice ALLOW WRITE TOPIC LITERAL t *", "User:NAME"),
        ("User:a ALLOW SING TOPIC LITERAL t *", "operation"),
        ("User:a ALLOW WRITE QUEUE LITERAL t *", "resource type"),
        ("User:a ALLOW WRITE TOPIC LITERAL t somehost", "host"),
        (
            "User:a ALLOW WRITE CLUSTER LITERAL other *",
            "kafka-cluster",
        ),
        ("User:a ALLOW WRITE TOPIC LITERAL t", "expected"),
    ] {
        let error = Acls::parse(&format!("# one\n{bad}\n"), Path::new("acls")).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("acls, line 2") && message.contains(says),
            "{message}"
        );
    }
}

#[test]
fn saved_acls_load_back_and_a_missing_file_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acls");
    assert!(Acls::load(&path).unwrap().is_empty());
    let mut acls = Acls::default();
    assert!(acls.add(acl("User:alice ALLOW READ GROUP PREFIXED billing- *")));
    assert!(!acls.add(acl("User:alice ALLOW READ GROUP PREFIXED billing- *")));
    acls.save(&path).unwrap();
    assert_eq!(Acls::load(&path).unwrap(), acls);
    let removed = acls.remove_where(|a| a.principal == "User:alice");
    assert_eq!(removed.len(), 1);
    assert!(acls.is_empty());
}

#[test]
fn a_filter_names_acls_as_kafkas_binding_filter_does() {
    use minibroker_security::acl::{AclFilter, PatternFilter};
    let all = Acls::parse(
        "User:a ALLOW READ TOPIC LITERAL orders *\n\
         User:a ALLOW READ TOPIC LITERAL * *\n\
         User:b DENY WRITE TOPIC PREFIXED ord *\n\
         User:b ALLOW READ GROUP LITERAL orders *\n",
        Path::new("acls"),
    )
    .unwrap();
    let count = |filter: &AclFilter| all.iter().filter(|acl| filter.matches(acl)).count();
    let any = AclFilter {
        resource_type: None,
        name: None,
        pattern: PatternFilter::Any,
        principal: None,
        host: None,
        operation: None,
        permission: None,
    };
    assert_eq!(count(&any), 4);
    let topic_orders = AclFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some("orders".into()),
        ..any.clone()
    };
    assert_eq!(count(&topic_orders), 1, "ANY pattern: the name exactly");
    let matching = AclFilter {
        pattern: PatternFilter::Match,
        ..topic_orders.clone()
    };
    assert_eq!(
        count(&matching),
        3,
        "MATCH: the literal, the * and the prefix"
    );
    let prefixed = AclFilter {
        resource_type: None,
        name: None,
        pattern: PatternFilter::Exactly(PatternType::Prefixed),
        ..any.clone()
    };
    assert_eq!(count(&prefixed), 1);
    let denies_of_b = AclFilter {
        principal: Some("User:b".into()),
        permission: Some(Permission::Deny),
        ..any
    };
    assert_eq!(count(&denies_of_b), 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// Any principal a certificate or a login gives, and any group or transactional id, reads
    /// back from the ACLs file as it was written.
    #[test]
    fn any_principal_and_resource_name_round_trip_through_the_file(
        name in "\\PC+",
        resource in "\\PC+",
    ) {
        let principal = format!("User:{name}");
        let text = format!(
            "{}\n",
            Acl {
                principal: principal.clone(),
                permission: Permission::Allow,
                operation: Operation::Read,
                resource_type: ResourceType::Group,
                pattern_type: PatternType::Literal,
                name: resource.clone(),
                host: "*".into(),
            }
        );
        let acls = Acls::parse(&text, Path::new("acls")).unwrap();
        let rules = authorizer(&[text.trim_end()]);
        let asked = Request {
            principal: &principal,
            operation: Operation::Read,
            resource_type: ResourceType::Group,
            name: &resource,
            host: None,
        };
        proptest::prop_assert!(rules.allows(&asked), "{text:?}");
        proptest::prop_assert_eq!(Acls::parse(&acls.to_text(), Path::new("acls")).unwrap(), acls);
    }
}

#[test]
fn a_principal_with_a_space_is_written_and_read_back() {
    let rules = authorizer(&["User:Jane%20Doe ALLOW READ TOPIC LITERAL t *"]);
    assert!(rules.allows(&request("User:Jane Doe", Operation::Read, "t")));
    assert!(!rules.allows(&request("User:Jane", Operation::Read, "t")));
}
