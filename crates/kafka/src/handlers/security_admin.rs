//! The security admin APIs, so `AdminClient`s, `kafka-acls` and `rpk` manage a broker:
//! CreateAcls, DescribeAcls and DeleteAcls over the ACLs file (Alter, Describe and Alter on the
//! cluster; SECURITY_DISABLED without `acls_file`), and DescribeUserScramCredentials and
//! AlterUserScramCredentials over the users file (Describe and Alter on the cluster). An
//! upsertion carries the salted password, never the password; the broker keeps only Kafka's
//! StoredKey and ServerKey made from it. Edits are written to the files at once, and seen by
//! every connection at once.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_security::acl::{
    Acl, AclFilter, CLUSTER_NAME, InvalidAcl, PatternFilter, PatternType, Permission,
};
use minibroker_security::{
    FileError, InvalidUserName, Operation, ResourceType, ScramCredential, ScramError,
    ScramMechanism,
};
use std::collections::BTreeMap;

use crate::front_end::KafkaFrontEnd;

/// Kafka's wire code for "any" in a filter.
const ANY: i8 = 1;
/// Kafka's pattern-type code for MATCH (filters only).
const MATCH: i8 = 2;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn message(error: ResponseError, detail: &str) -> (i16, Option<StrBytes>) {
    (error.code(), Some(text(detail)))
}

/// Kafka's mechanism codes in the SCRAM admin APIs.
fn mechanism_of(code: i8) -> Option<ScramMechanism> {
    match code {
        1 => Some(ScramMechanism::Sha256),
        2 => Some(ScramMechanism::Sha512),
        _ => None,
    }
}

fn mechanism_code(mechanism: ScramMechanism) -> i8 {
    match mechanism {
        ScramMechanism::Sha256 => 1,
        ScramMechanism::Sha512 => 2,
    }
}

/// Why one entry of an ACL or SCRAM admin request is refused; the answer carries its message.
#[derive(Debug, thiserror::Error)]
enum BadEntry {
    /// A code that names nothing.
    #[error("unknown {what} code {code}")]
    UnknownCode {
        /// What the code is of.
        what: &'static str,
        /// The code.
        code: i8,
    },
    /// An ACL the broker would not keep.
    #[error(transparent)]
    Acl(#[from] InvalidAcl),
    /// A SCRAM mechanism code that names none this broker knows.
    #[error("unknown SCRAM mechanism")]
    UnknownMechanism,
    /// A user name the users file cannot hold.
    #[error(transparent)]
    UserName(#[from] InvalidUserName),
    /// A credential that does not fit its mechanism.
    #[error(transparent)]
    Credential(#[from] ScramError),
    /// A negative iteration count.
    #[error("negative iterations")]
    NegativeIterations,
}

/// The value `code` names, for `what`.
fn known<T>(code: i8, what: &'static str, from: fn(i8) -> Option<T>) -> Result<T, BadEntry> {
    from(code).ok_or(BadEntry::UnknownCode { what, code })
}

/// `None` for Kafka's ANY, else the value `code` names.
fn pick<T>(code: i8, what: &'static str, from: fn(i8) -> Option<T>) -> Result<Option<T>, BadEntry> {
    match code {
        ANY => Ok(None),
        code => known(code, what, from).map(Some),
    }
}

/// A filter from its wire fields; the reason when a code names nothing.
fn filter_of(
    (resource_type, name, pattern): (i8, Option<&StrBytes>, i8),
    (principal, host): (Option<&StrBytes>, Option<&StrBytes>),
    (operation, permission): (i8, i8),
) -> Result<AclFilter, BadEntry> {
    Ok(AclFilter {
        resource_type: pick(resource_type, "resource type", ResourceType::from_code)?,
        name: name.map(ToString::to_string),
        pattern: match pattern {
            ANY => PatternFilter::Any,
            MATCH => PatternFilter::Match,
            code => PatternFilter::Exactly(known(code, "pattern type", PatternType::from_code)?),
        },
        principal: principal.map(ToString::to_string),
        host: host.map(ToString::to_string),
        operation: pick(operation, "operation", Operation::from_code)?,
        permission: pick(permission, "permission", Permission::from_code)?,
    })
}

impl KafkaFrontEnd {
    /// The refusal of an ACL API: SECURITY_DISABLED without an authoriser, or
    /// CLUSTER_AUTHORIZATION_FAILED without `operation` on the cluster.
    fn acl_api_refusal(&self, operation: Operation) -> Option<(i16, Option<StrBytes>)> {
        if !self.guard.is_on() {
            return Some(message(
                ResponseError::SecurityDisabled,
                "no authorizer: the broker has no acls_file",
            ));
        }
        (!self.may(operation, ResourceType::Cluster, CLUSTER_NAME)).then(|| {
            message(
                ResponseError::ClusterAuthorizationFailed,
                &format!("{operation} on the cluster is needed"),
            )
        })
    }

    pub(crate) fn create_acls(&self, request: CreateAclsRequest) -> CreateAclsResponse {
        let count = request.creations.len();
        let answer = |results| CreateAclsResponse::default().with_results(results);
        if let Some((code, detail)) = self.acl_api_refusal(Operation::Alter) {
            let refused = AclCreationResult::default()
                .with_error_code(code)
                .with_error_message(detail);
            return answer(vec![refused; count]);
        }
        let wanted: Vec<Result<Acl, BadEntry>> = request
            .creations
            .iter()
            .map(|c| {
                let acl = Acl {
                    principal: c.principal.to_string(),
                    permission: known(c.permission_type, "permission", Permission::from_code)?,
                    operation: known(c.operation, "operation", Operation::from_code)?,
                    resource_type: known(
                        c.resource_type,
                        "resource type",
                        ResourceType::from_code,
                    )?,
                    pattern_type: known(
                        c.resource_pattern_type,
                        "pattern type",
                        PatternType::from_code,
                    )?,
                    name: c.resource_name.to_string(),
                    host: c.host.to_string(),
                };
                acl.check()?;
                Ok(acl)
            })
            .collect();
        let saved = self.edit_acls(|acls| {
            for acl in wanted.iter().flatten() {
                acls.add(acl.clone());
            }
        });
        let results = wanted
            .iter()
            .map(|wanted| {
                let (code, detail) = match (wanted, &saved) {
                    (Err(reason), _) => message(ResponseError::InvalidRequest, &reason.to_string()),
                    (Ok(_), Err(reason)) => {
                        message(ResponseError::UnknownServerError, &reason.to_string())
                    }
                    (Ok(acl), Ok(())) => {
                        tracing::info!(principal = %self.guard.principal(), %acl, "ACL created");
                        (0, None)
                    }
                };
                AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message(detail)
            })
            .collect();
        answer(results)
    }

    pub(crate) fn describe_acls(&self, request: &DescribeAclsRequest) -> DescribeAclsResponse {
        if let Some((code, detail)) = self.acl_api_refusal(Operation::Describe) {
            return DescribeAclsResponse::default()
                .with_error_code(code)
                .with_error_message(detail);
        }
        let filter = match filter_of(
            (
                request.resource_type_filter,
                request.resource_name_filter.as_ref(),
                request.pattern_type_filter,
            ),
            (
                request.principal_filter.as_ref(),
                request.host_filter.as_ref(),
            ),
            (request.operation, request.permission_type),
        ) {
            Ok(filter) => filter,
            Err(reason) => {
                let (code, detail) = message(ResponseError::InvalidRequest, &reason.to_string());
                return DescribeAclsResponse::default()
                    .with_error_code(code)
                    .with_error_message(detail);
            }
        };
        let acls = self.current_acls();
        let mut resources: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
        for acl in acls.iter().filter(|acl| filter.matches(acl)) {
            let key = (
                acl.resource_type.code(),
                acl.name.clone(),
                acl.pattern_type.code(),
            );
            resources.entry(key).or_default().push(
                AclDescription::default()
                    .with_principal(text(&acl.principal))
                    .with_host(text(&acl.host))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission.code()),
            );
        }
        let resources = resources
            .into_iter()
            .map(|((resource_type, name, pattern_type), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(text(&name))
                    .with_pattern_type(pattern_type)
                    .with_acls(acls)
            })
            .collect();
        DescribeAclsResponse::default().with_resources(resources)
    }

    pub(crate) fn delete_acls(&self, request: &DeleteAclsRequest) -> DeleteAclsResponse {
        let answer = |results| DeleteAclsResponse::default().with_filter_results(results);
        if let Some((code, detail)) = self.acl_api_refusal(Operation::Alter) {
            let refused = DeleteAclsFilterResult::default()
                .with_error_code(code)
                .with_error_message(detail);
            return answer(vec![refused; request.filters.len()]);
        }
        let filters: Vec<Result<AclFilter, BadEntry>> = request
            .filters
            .iter()
            .map(|f| {
                filter_of(
                    (
                        f.resource_type_filter,
                        f.resource_name_filter.as_ref(),
                        f.pattern_type_filter,
                    ),
                    (f.principal_filter.as_ref(), f.host_filter.as_ref()),
                    (f.operation, f.permission_type),
                )
            })
            .collect();
        let removed = self.edit_acls(|acls| {
            filters
                .iter()
                .map(|filter| match filter {
                    Ok(filter) => acls.remove_where(|acl| filter.matches(acl)),
                    Err(_) => Vec::new(),
                })
                .collect::<Vec<_>>()
        });
        let results = filters
            .iter()
            .enumerate()
            .map(|(at, filter)| {
                let (code, detail, matching) = match (filter, &removed) {
                    (Err(reason), _) => {
                        let (code, detail) =
                            message(ResponseError::InvalidRequest, &reason.to_string());
                        (code, detail, Vec::new())
                    }
                    (Ok(_), Err(reason)) => {
                        let (code, detail) =
                            message(ResponseError::UnknownServerError, &reason.to_string());
                        (code, detail, Vec::new())
                    }
                    (Ok(_), Ok(removed)) => (0, None, removed[at].clone()),
                };
                let matching = matching
                    .iter()
                    .map(|acl| {
                        tracing::info!(principal = %self.guard.principal(), %acl, "ACL deleted");
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(acl.resource_type.code())
                            .with_resource_name(text(&acl.name))
                            .with_pattern_type(acl.pattern_type.code())
                            .with_principal(text(&acl.principal))
                            .with_host(text(&acl.host))
                            .with_operation(acl.operation.code())
                            .with_permission_type(acl.permission.code())
                    })
                    .collect();
                DeleteAclsFilterResult::default()
                    .with_error_code(code)
                    .with_error_message(detail)
                    .with_matching_acls(matching)
            })
            .collect();
        answer(results)
    }

    /// Describe (or, for `alter`, Alter) on the cluster, when authorisation is on.
    fn scram_api_refusal(&self, operation: Operation) -> Option<(i16, Option<StrBytes>)> {
        if self.session.settings().is_none() {
            return Some(message(
                ResponseError::SecurityDisabled,
                "the listener has no SASL: no users file to manage",
            ));
        }
        (!self.may(operation, ResourceType::Cluster, CLUSTER_NAME)).then(|| {
            message(
                ResponseError::ClusterAuthorizationFailed,
                &format!("{operation} on the cluster is needed"),
            )
        })
    }

    pub(crate) fn describe_user_scram_credentials(
        &self,
        request: &DescribeUserScramCredentialsRequest,
    ) -> DescribeUserScramCredentialsResponse {
        if let Some((code, detail)) = self.scram_api_refusal(Operation::Describe) {
            return DescribeUserScramCredentialsResponse::default()
                .with_error_code(code)
                .with_error_message(detail);
        }
        let users = self
            .session
            .settings()
            .map(|sasl| sasl.users())
            .unwrap_or_default();
        let mut infos: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
        for (name, mechanism, iterations) in users.list() {
            infos.entry(name).or_default().push(
                CredentialInfo::default()
                    .with_mechanism(mechanism_code(mechanism))
                    .with_iterations(i32::try_from(iterations).unwrap_or(i32::MAX)),
            );
        }
        let names: Vec<String> = match &request.users {
            Some(asked) => asked.iter().map(|u| u.name.to_string()).collect(),
            None => infos.keys().map(|name| (*name).to_owned()).collect(),
        };
        let results = names
            .into_iter()
            .map(|name| {
                let answer = DescribeUserScramCredentialsResult::default().with_user(text(&name));
                match infos.get(name.as_str()) {
                    Some(infos) => answer.with_credential_infos(infos.clone()),
                    None => answer
                        .with_error_code(ResponseError::ResourceNotFound.code())
                        .with_error_message(Some(text(&format!(
                            "Attempt to describe a user credential that does not exist: {name}"
                        )))),
                }
            })
            .collect();
        DescribeUserScramCredentialsResponse::default().with_results(results)
    }

    pub(crate) fn alter_user_scram_credentials(
        &self,
        request: &AlterUserScramCredentialsRequest,
    ) -> AlterUserScramCredentialsResponse {
        let users: Vec<&StrBytes> = request
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(request.upsertions.iter().map(|u| &u.name))
            .collect();
        let answer = |results| AlterUserScramCredentialsResponse::default().with_results(results);
        let result = |user: &StrBytes, (code, detail): (i16, Option<StrBytes>)| {
            AlterUserScramCredentialsResult::default()
                .with_user(user.clone())
                .with_error_code(code)
                .with_error_message(detail)
        };
        if let Some(refused) = self.scram_api_refusal(Operation::Alter) {
            return answer(users.iter().map(|u| result(u, refused.clone())).collect());
        }
        // Each change checked first; the good ones written together.
        let deletions: Vec<Result<(String, ScramMechanism), BadEntry>> = request
            .deletions
            .iter()
            .map(|d| {
                let mechanism = mechanism_of(d.mechanism).ok_or(BadEntry::UnknownMechanism)?;
                minibroker_security::check_user_name(&d.name)?;
                Ok((d.name.to_string(), mechanism))
            })
            .collect();
        let upsertions: Vec<Result<(String, ScramMechanism, ScramCredential), BadEntry>> = request
            .upsertions
            .iter()
            .map(|u| {
                let mechanism = mechanism_of(u.mechanism).ok_or(BadEntry::UnknownMechanism)?;
                minibroker_security::check_user_name(&u.name)?;
                let iterations =
                    u32::try_from(u.iterations).map_err(|_| BadEntry::NegativeIterations)?;
                let credential = ScramCredential::from_salted_password(
                    mechanism,
                    &u.salt,
                    &u.salted_password,
                    iterations,
                )?;
                Ok((u.name.to_string(), mechanism, credential))
            })
            .collect();
        let saved = match self.session.settings() {
            Some(sasl) => sasl.edit_users(|file| {
                let missing: Vec<bool> = deletions
                    .iter()
                    .map(|deletion| match deletion {
                        Ok((name, mechanism)) => file.remove(name, Some(*mechanism)) == 0,
                        Err(_) => false,
                    })
                    .collect();
                for (name, mechanism, credential) in upsertions.iter().flatten() {
                    file.set(name, *mechanism, credential.clone());
                }
                missing
            }),
            None => Err(FileError::NotConfigured {
                setting: "users_file",
            }),
        };
        let mut results = Vec::with_capacity(users.len());
        for (at, (user, deletion)) in users.iter().zip(&deletions).enumerate() {
            let outcome = match (deletion, &saved) {
                (Err(reason), _) => {
                    message(ResponseError::UnsupportedSaslMechanism, &reason.to_string())
                }
                (Ok(_), Err(reason)) => {
                    message(ResponseError::UnknownServerError, &reason.to_string())
                }
                (Ok(_), Ok(missing)) if missing[at] => message(
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist",
                ),
                (Ok(_), Ok(_)) => (0, None),
            };
            results.push(result(user, outcome));
        }
        for (user, upsertion) in users[deletions.len()..].iter().zip(&upsertions) {
            let outcome = match (upsertion, &saved) {
                (Err(reason), _) => {
                    message(ResponseError::UnacceptableCredential, &reason.to_string())
                }
                (Ok(_), Err(reason)) => {
                    message(ResponseError::UnknownServerError, &reason.to_string())
                }
                (Ok((name, mechanism, _)), Ok(_)) => {
                    tracing::info!(principal = %self.guard.principal(), user = name, mechanism = mechanism.name(), "SCRAM credential set");
                    (0, None)
                }
            };
            results.push(result(user, outcome));
        }
        answer(results)
    }
}
