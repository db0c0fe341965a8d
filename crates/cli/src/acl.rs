//! `minibroker acl add|list|remove|check`: the ACLs file, in the vocabulary of Kafka's
//! `kafka-acls` (`--allow-principal`, `--operation`, `--topic`, `--group`, `--transactional-id`,
//! `--cluster`, `--resource-pattern-type`, `--producer`, `--consumer`). A running broker reads
//! the file again within a second of a change. `check` says which rule allows or denies a
//! request, by the broker's own decision (`minibroker_security::acl`).

use anyhow::{Result, bail};
use minibroker_security::acl::{
    Acl, Acls, Authorizer, CLUSTER_NAME, PatternType, Permission, Request, check_principal,
};
use minibroker_security::{Operation, ResourceType};
use serde_json::json;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `acl`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Subcommand,
}

/// The resources a command is about.
#[derive(Debug, clap::Args)]
struct Resources {
    /// A topic (repeat for more; `*` is every topic).
    #[arg(long)]
    topic: Vec<String>,
    /// A consumer group (repeat for more; `*` is every group).
    #[arg(long)]
    group: Vec<String>,
    /// A transactional id (repeat for more; `*` is every one).
    #[arg(long)]
    transactional_id: Vec<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// How the names match: literal (the name, or `*`) or prefixed (names starting with it).
    #[arg(long, default_value = "literal")]
    resource_pattern_type: String,
}

impl Resources {
    /// Every (type, name) given, with the pattern type.
    fn named(&self) -> Result<(Vec<(ResourceType, String)>, PatternType)> {
        let pattern = PatternType::from_word(&self.resource_pattern_type).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown --resource-pattern-type {:?}: literal or prefixed",
                self.resource_pattern_type
            )
        })?;
        let mut named = Vec::new();
        named.extend(self.topic.iter().map(|t| (ResourceType::Topic, t.clone())));
        named.extend(self.group.iter().map(|g| (ResourceType::Group, g.clone())));
        named.extend(
            self.transactional_id
                .iter()
                .map(|x| (ResourceType::TransactionalId, x.clone())),
        );
        if self.cluster {
            named.push((ResourceType::Cluster, CLUSTER_NAME.to_owned()));
        }
        Ok((named, pattern))
    }
}

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    /// Adds ACLs: each principal, each operation, each resource.
    Add {
        /// The ACLs file (created if missing, readable by its owner only).
        #[arg(long)]
        acls_file: PathBuf,
        /// A principal to allow (User:NAME, or User:* for everyone; repeat for more).
        #[arg(long)]
        allow_principal: Vec<String>,
        /// A principal to deny (User:NAME, or User:*; repeat for more).
        #[arg(long)]
        deny_principal: Vec<String>,
        /// The client address the ACLs apply to: an IP address, or * for any.
        #[arg(long, default_value = "*")]
        host: String,
        /// Operations: read, write, create, delete, alter, describe, idempotent-write,
        /// describe-configs, alter-configs, cluster-action or all (comma-separated or repeated).
        #[arg(long, value_delimiter = ',')]
        operation: Vec<String>,
        /// What a producer needs: Write, Describe and Create on the topics, Write and Describe
        /// on the transactional ids (and IdempotentWrite on the cluster with --idempotent).
        #[arg(long, conflicts_with = "consumer")]
        producer: bool,
        /// With --producer: IdempotentWrite on the cluster too.
        #[arg(long, requires = "producer")]
        idempotent: bool,
        /// What a consumer needs: Read and Describe on the topics, Read on the groups.
        #[arg(long)]
        consumer: bool,
        #[command(flatten)]
        resources: Resources,
    },
    /// Removes the ACLs that match every filter given.
    Remove {
        /// The ACLs file.
        #[arg(long)]
        acls_file: PathBuf,
        /// Only ALLOW ACLs of this principal.
        #[arg(long)]
        allow_principal: Option<String>,
        /// Only DENY ACLs of this principal.
        #[arg(long, conflicts_with = "allow_principal")]
        deny_principal: Option<String>,
        /// Only these operations (comma-separated or repeated).
        #[arg(long, value_delimiter = ',')]
        operation: Vec<String>,
        #[command(flatten)]
        resources: Resources,
    },
    /// Lists the ACLs, all or those of a principal or resource.
    List {
        /// The ACLs file.
        #[arg(long)]
        acls_file: PathBuf,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// JSON lines instead of text: one line, {"acls": [...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        resources: Resources,
    },
    /// Says whether the ACLs allow a request, and which rule decided.
    Check {
        /// The ACLs file.
        #[arg(long)]
        acls_file: PathBuf,
        /// Who asks (User:NAME).
        #[arg(long)]
        principal: String,
        /// The operation.
        #[arg(long)]
        operation: String,
        /// The client's address, for ACLs of one host.
        #[arg(long)]
        host: Option<IpAddr>,
        /// A super user, as the broker's super_users (repeat for more).
        #[arg(long)]
        super_user: Vec<String>,
        /// As the broker's allow_everyone_if_no_acl_found.
        #[arg(long)]
        allow_everyone_if_no_acl_found: bool,
        #[command(flatten)]
        resources: Resources,
    },
}

fn operations(words: &[String]) -> Result<Vec<Operation>> {
    words
        .iter()
        .map(|word| {
            Operation::from_word(word).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown operation {word:?}: read, write, create, delete, alter, describe, idempotent-write, describe-configs, alter-configs, cluster-action or all"
                )
            })
        })
        .collect()
}

/// The ACLs `add` makes: for each principal, each resource, each operation.
fn wanted(
    principals: &[(Permission, String)],
    host: &str,
    operations: &[Operation],
    (producer, idempotent, consumer): (bool, bool, bool),
    (named, pattern): (Vec<(ResourceType, String)>, PatternType),
) -> Result<Vec<Acl>> {
    let for_resource = |resource_type: ResourceType| -> Vec<Operation> {
        let mut ops = operations.to_vec();
        match resource_type {
            ResourceType::Topic if producer => {
                ops.extend([Operation::Write, Operation::Describe, Operation::Create]);
            }
            ResourceType::TransactionalId if producer => {
                ops.extend([Operation::Write, Operation::Describe]);
            }
            ResourceType::Topic if consumer => ops.extend([Operation::Read, Operation::Describe]),
            ResourceType::Group if consumer => ops.push(Operation::Read),
            _ => {}
        }
        ops
    };
    let mut named = named;
    if producer && idempotent && !named.iter().any(|(t, _)| *t == ResourceType::Cluster) {
        named.push((ResourceType::Cluster, CLUSTER_NAME.to_owned()));
    }
    let mut acls = Vec::new();
    for (permission, principal) in principals {
        for (resource_type, name) in &named {
            let mut ops = for_resource(*resource_type);
            if *resource_type == ResourceType::Cluster && producer && idempotent {
                ops.push(Operation::IdempotentWrite);
            }
            for operation in ops {
                let pattern_type = if *resource_type == ResourceType::Cluster {
                    PatternType::Literal
                } else {
                    pattern
                };
                let acl = Acl {
                    principal: principal.clone(),
                    permission: *permission,
                    operation,
                    resource_type: *resource_type,
                    pattern_type,
                    name: name.clone(),
                    host: host.to_owned(),
                };
                acl.check()?;
                acls.push(acl);
            }
        }
    }
    if acls.is_empty() {
        bail!(
            "nothing to add: give a principal (--allow-principal/--deny-principal), a resource (--topic, --group, --transactional-id, --cluster) and --operation, --producer or --consumer"
        );
    }
    Ok(acls)
}

fn print(acls: &[&Acl], as_json: bool) {
    if as_json {
        let listed: Vec<_> = acls
            .iter()
            .map(|acl| {
                json!({
                    "principal": acl.principal, "permission": acl.permission.word(),
                    "operation": acl.operation.word(), "resource_type": acl.resource_type.word(),
                    "pattern_type": acl.pattern_type.word(), "name": acl.name, "host": acl.host,
                })
            })
            .collect();
        println!("{}", json!({ "acls": listed }));
    } else {
        for acl in acls {
            println!("{acl}");
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        Subcommand::Add {
            acls_file,
            allow_principal,
            deny_principal,
            host,
            operation,
            producer,
            idempotent,
            consumer,
            resources,
        } => {
            let principals: Vec<(Permission, String)> = allow_principal
                .into_iter()
                .map(|p| (Permission::Allow, p))
                .chain(deny_principal.into_iter().map(|p| (Permission::Deny, p)))
                .collect();
            let acls = wanted(
                &principals,
                &host,
                &operations(&operation)?,
                (producer, idempotent, consumer),
                resources.named()?,
            )?;
            let mut file = Acls::load(&acls_file)?;
            let added: Vec<&Acl> = acls.iter().filter(|acl| file.add((*acl).clone())).collect();
            file.save(&acls_file)?;
            println!(
                "{} ACL(s) added, {} already there, in {}",
                added.len(),
                acls.len() - added.len(),
                acls_file.display()
            );
            print(&added, false);
            Ok(())
        }
        Subcommand::Remove {
            acls_file,
            allow_principal,
            deny_principal,
            operation,
            resources,
        } => {
            let principal = allow_principal
                .map(|p| (Permission::Allow, p))
                .or(deny_principal.map(|p| (Permission::Deny, p)));
            let operations = operations(&operation)?;
            let (named, pattern) = resources.named()?;
            let explicit_pattern = resources.resource_pattern_type != "literal";
            let mut file = Acls::load(&acls_file)?;
            let removed = file.remove_where(|acl| {
                principal
                    .as_ref()
                    .is_none_or(|(perm, p)| acl.permission == *perm && acl.principal == *p)
                    && (operations.is_empty() || operations.contains(&acl.operation))
                    && (named.is_empty()
                        || named
                            .iter()
                            .any(|(t, n)| acl.resource_type == *t && acl.name == *n))
                    && (!explicit_pattern || acl.pattern_type == pattern)
            });
            if removed.is_empty() {
                bail!("no ACL in {} matches", acls_file.display());
            }
            file.save(&acls_file)?;
            println!("{} ACL(s) removed", removed.len());
            print(&removed.iter().collect::<Vec<_>>(), false);
            Ok(())
        }
        Subcommand::List {
            acls_file,
            principal,
            json,
            resources,
        } => {
            let (named, _) = resources.named()?;
            let file = Acls::load(&acls_file)?;
            let listed: Vec<&Acl> = file
                .iter()
                .filter(|acl| principal.as_ref().is_none_or(|p| acl.principal == *p))
                .filter(|acl| named.is_empty() || named.iter().any(|(t, n)| acl.names(*t, n)))
                .collect();
            print(&listed, json);
            Ok(())
        }
        Subcommand::Check {
            acls_file,
            principal,
            operation,
            host,
            super_user,
            allow_everyone_if_no_acl_found,
            resources,
        } => {
            check_principal(&principal)?;
            let [operation] = operations(std::slice::from_ref(&operation))?[..] else {
                bail!("give one --operation");
            };
            let (named, _) = resources.named()?;
            let [(resource_type, name)] = &named[..] else {
                bail!("give one resource: --topic, --group, --transactional-id or --cluster");
            };
            let authorizer = Authorizer {
                acls: Arc::new(Acls::load(&acls_file)?),
                super_users: Arc::new(super_user),
                allow_everyone_if_no_acl_found,
            };
            let decision = authorizer.authorize(&Request {
                principal: &principal,
                host,
                operation,
                resource_type: *resource_type,
                name,
            });
            println!("{decision}");
            if !decision.allowed {
                let theirs: Vec<String> = authorizer
                    .acls
                    .iter()
                    .filter(|acl| acl.principal == principal || acl.principal == "User:*")
                    .map(ToString::to_string)
                    .collect();
                if theirs.is_empty() {
                    println!("{principal} has no ACL");
                } else {
                    println!("{principal} has:");
                    for acl in theirs {
                        println!("  {acl}");
                    }
                }
                std::process::exit(1);
            }
            Ok(())
        }
    }
}
