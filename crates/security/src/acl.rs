//! Kafka's authorisation model: ACLs and the decision over them.
//!
//! An ACL allows or denies one principal (`User:alice`, or `User:*` for everyone) one
//! operation on the resources a pattern names: a topic, a group, a transactional id or the
//! cluster, by LITERAL name (`*` is every resource of the type) or by PREFIXED name. The
//! decision is Kafka's `StandardAuthorizer`'s:
//!
//! 1. a super user is allowed everything;
//! 2. any matching DENY denies;
//! 3. any matching ALLOW allows — ALLOW of Read, Write, Delete or Alter implies Describe, ALLOW
//!    of AlterConfigs implies DescribeConfigs, ALLOW of All implies everything (a DENY implies
//!    nothing but itself and All);
//! 4. otherwise, when no ACL at all names the resource and `allow_everyone_if_no_acl_found` is
//!    set, allowed; else denied.
//!
//! Each [`Decision`] says why, naming the ACL that decided, so `minibroker acl check` and the
//! broker's denial log can answer "which rule is missing?".
//!
//! The ACLs file holds one ACL per line, in the words of `kafka-acls --list`:
//!
//! ```text
//! # PRINCIPAL PERMISSION OPERATION RESOURCE-TYPE PATTERN-TYPE NAME HOST
//! User:alice ALLOW WRITE TOPIC LITERAL orders *
//! User:bob ALLOW READ GROUP PREFIXED billing- *
//! ```
//!
//! These lines are written in one checksummed record (magic `\0MBA`, version 1, through
//! [`minibroker_storage`]), replaced atomically and readable by its owner only; a plain text
//! file (older brokers', or one written by hand) is read as it is.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use crate::file::{FileError, load_list, save_list};
use minibroker_storage::keyed_lines::KeyedLines;
use minibroker_storage::{FsStorage, Storage};

/// Names an enum's variants by Kafka's words and wire codes, both ways.
macro_rules! kafka_words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal, $word:literal;)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every value, in Kafka's order.
            pub const ALL_VALUES: &[Self] = &[$(Self::$variant,)*];

            /// Kafka's word for it (as `kafka-acls --list` prints it).
            #[must_use]
            pub fn word(self) -> &'static str {
                match self {
                    $(Self::$variant => $word,)*
                }
            }

            /// Its code on Kafka's wire.
            #[must_use]
            pub fn code(self) -> i8 {
                match self {
                    $(Self::$variant => $code,)*
                }
            }

            /// The value of a wire code.
            #[must_use]
            pub fn from_code(code: i8) -> Option<Self> {
                match code {
                    $($code => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The value of a word, in any case, `-` or `_` between words
            /// (`idempotent-write`, `IDEMPOTENT_WRITE`, `IdempotentWrite`).
            #[must_use]
            pub fn from_word(word: &str) -> Option<Self> {
                let folded: String = word
                    .chars()
                    .filter(|c| *c != '-' && *c != '_')
                    .map(|c| c.to_ascii_uppercase())
                    .collect();
                Self::ALL_VALUES
                    .iter()
                    .copied()
                    .find(|value| value.word().replace('_', "") == folded)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.word())
            }
        }
    };
}

kafka_words! {
    /// What an ACL is about (Kafka's `ResourceType`).
    ResourceType {
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer group.
        Group = 3, "GROUP";
        /// The cluster (named `kafka-cluster`).
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
    }
}

kafka_words! {
    /// How an ACL's name matches (Kafka's `PatternType`).
    PatternType {
        /// The name exactly, or `*` for every resource.
        Literal = 3, "LITERAL";
        /// Every resource whose name starts with it.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_words! {
    /// What is done to a resource (Kafka's `AclOperation`).
    Operation {
        /// Everything.
        All = 2, "ALL";
        /// Consume; join a group.
        Read = 3, "READ";
        /// Produce; write a transaction.
        Write = 4, "WRITE";
        /// Create topics.
        Create = 5, "CREATE";
        /// Delete topics, groups.
        Delete = 6, "DELETE";
        /// Change ACLs, users.
        Alter = 7, "ALTER";
        /// See that it exists, and its state.
        Describe = 8, "DESCRIBE";
        /// Broker-to-broker actions.
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Read configurations.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Change configurations.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Get an idempotent producer id.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
    }
}

kafka_words! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    Permission {
        /// Denies, whatever else allows.
        Deny = 2, "DENY";
        /// Allows, unless something denies.
        Allow = 3, "ALLOW";
    }
}

/// The cluster resource's one name.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The principal a connection without a login or certificate has.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Acl {
    /// `User:NAME`, or `User:*` for every principal.
    pub principal: String,
    /// Allow or deny.
    pub permission: Permission,
    /// The operation.
    pub operation: Operation,
    /// The kind of resource.
    pub resource_type: ResourceType,
    /// How `name` matches.
    pub pattern_type: PatternType,
    /// The resource's name, its prefix, or `*`.
    pub name: String,
    /// The client address it applies to: `*` or one IP address.
    pub host: String,
}

/// One line of the ACLs file; the principal and the resource name are written by
/// [`crate::field`], so a name with a space (`User:Jane Doe`, a certificate's) reads back.
impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {}",
            crate::field::encode(&self.principal),
            self.permission,
            self.operation,
            self.resource_type,
            self.pattern_type,
            crate::field::encode(&self.name),
            self.host
        )
    }
}

/// Why an ACL is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

/// Checks a principal: `User:NAME` (NAME with no blank), or `User:*`.
///
/// # Errors
/// [`InvalidAcl`] saying what is wrong.
pub fn check_principal(principal: &str) -> Result<(), InvalidAcl> {
    match principal.strip_prefix("User:") {
        // Any name a certificate or a login gives, blanks too: the file encodes them.
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(InvalidAcl(format!(
            "principal {principal:?} is not User:NAME (or User:*)"
        ))),
    }
}

impl Acl {
    /// Checks the fields go together: a principal `User:…`, a host `*` or an IP address, a name,
    /// and the cluster named `kafka-cluster`.
    ///
    /// # Errors
    /// [`InvalidAcl`] saying what is wrong.
    pub fn check(&self) -> Result<(), InvalidAcl> {
        check_principal(&self.principal)?;
        if self.host != "*" && self.host.parse::<IpAddr>().is_err() {
            return Err(InvalidAcl(format!(
                "host {:?} is neither * nor an IP address",
                self.host
            )));
        }
        if self.name.is_empty() {
            return Err(InvalidAcl("the resource name is empty".into()));
        }
        if self.resource_type == ResourceType::Cluster
            && (self.name != CLUSTER_NAME || self.pattern_type != PatternType::Literal)
        {
            return Err(InvalidAcl(format!(
                "the cluster resource is LITERAL {CLUSTER_NAME}"
            )));
        }
        Ok(())
    }

    /// Whether the ACL's pattern names the resource `resource_type` `name`.
    #[must_use]
    pub fn names(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == "*" || self.name == name,
                PatternType::Prefixed => name.starts_with(&self.name),
            }
    }

    fn applies_to(&self, principal: &str, host: Option<IpAddr>) -> bool {
        (self.principal == principal || self.principal == "User:*")
            && (self.host == "*"
                || host.is_some_and(|ip| {
                    // Both canonical: `::ffff:10.0.0.1` and `10.0.0.1` are one host.
                    self.host
                        .parse::<IpAddr>()
                        .is_ok_and(|acl| acl.to_canonical() == ip.to_canonical())
                }))
    }

    /// Whether the ACL covers `operation`, with Kafka's implications for ALLOW.
    fn covers(&self, operation: Operation) -> bool {
        if self.operation == operation || self.operation == Operation::All {
            return true;
        }
        self.permission == Permission::Allow
            && match operation {
                Operation::Describe => matches!(
                    self.operation,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ),
                Operation::DescribeConfigs => self.operation == Operation::AlterConfigs,
                _ => false,
            }
    }

    fn parse(line: &str) -> Result<Self, InvalidAcl> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [
            principal,
            permission,
            operation,
            resource_type,
            pattern_type,
            name,
            host,
        ] = fields[..]
        else {
            return Err(InvalidAcl(
                "expected PRINCIPAL PERMISSION OPERATION RESOURCE-TYPE PATTERN-TYPE NAME HOST"
                    .into(),
            ));
        };
        let word = |what: &str, value: &str| InvalidAcl(format!("unknown {what} {value:?}"));
        let decode = |field| {
            crate::field::decode(field)
                .map(std::borrow::Cow::into_owned)
                .map_err(|error| InvalidAcl(error.to_string()))
        };
        let acl = Self {
            principal: decode(principal)?,
            permission: Permission::from_word(permission)
                .ok_or_else(|| word("permission", permission))?,
            operation: Operation::from_word(operation)
                .ok_or_else(|| word("operation", operation))?,
            resource_type: ResourceType::from_word(resource_type)
                .ok_or_else(|| word("resource type", resource_type))?,
            pattern_type: PatternType::from_word(pattern_type)
                .ok_or_else(|| word("pattern type", pattern_type))?,
            name: decode(name)?,
            host: host.to_owned(),
        };
        acl.check()?;
        Ok(acl)
    }
}

/// A set of ACLs: the ACLs file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acls {
    acls: BTreeSet<Acl>,
}

impl Acls {
    /// The ACLs of a file's `text` (`path` names it in errors).
    ///
    /// # Errors
    /// [`FileError::Line`] for the first line that does not read.
    pub fn parse(text: &str, path: &Path) -> Result<Self, FileError> {
        let mut acls = BTreeSet::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let acl = Acl::parse(line).map_err(|InvalidAcl(reason)| FileError::Line {
                path: path.to_owned(),
                line: index + 1,
                reason,
            })?;
            acls.insert(acl);
        }
        Ok(Self { acls })
    }

    /// The ACLs of the file at `path`; none when it does not exist.
    ///
    /// # Errors
    /// As [`Self::parse`], or the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        Self::load_from(&FsStorage, path)
    }

    /// The ACLs of the file at `path` on `storage`; none when it does not exist.
    ///
    /// # Errors
    /// As [`Self::load`].
    pub fn load_from(storage: &dyn Storage, path: &Path) -> Result<Self, FileError> {
        load_list(storage, path, &file(), Self::parse)
    }

    /// The file's text.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = String::from(
            "# minibroker ACLs: PRINCIPAL PERMISSION OPERATION RESOURCE-TYPE PATTERN-TYPE NAME HOST\n",
        );
        for acl in &self.acls {
            text.push_str(&acl.to_string());
            text.push('\n');
        }
        text
    }

    /// Replaces the file at `path` with these ACLs, atomically, readable by its owner only.
    ///
    /// # Errors
    /// [`FileError::Io`] when it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), FileError> {
        self.save_to(&FsStorage, path)
    }

    /// [`Self::save`], on `storage`.
    ///
    /// # Errors
    /// As [`Self::save`].
    pub fn save_to(&self, storage: &dyn Storage, path: &Path) -> Result<(), FileError> {
        save_list(storage, path, &file(), &self.to_text())
    }

    /// Adds `acl`; false if it was there already.
    pub fn add(&mut self, acl: Acl) -> bool {
        self.acls.insert(acl)
    }

    /// Removes the ACLs `matches` picks; returns them.
    pub fn remove_where(&mut self, mut matches: impl FnMut(&Acl) -> bool) -> Vec<Acl> {
        let removed: Vec<Acl> = self
            .acls
            .iter()
            .filter(|acl| matches(acl))
            .cloned()
            .collect();
        for acl in &removed {
            self.acls.remove(acl);
        }
        removed
    }

    /// Every ACL, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Acl> {
        self.acls.iter()
    }

    /// How many ACLs there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.acls.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.acls.is_empty()
    }
}

/// How an [`AclFilter`] matches patterns (Kafka's `PatternType` in a filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type; the name, when given, exactly.
    Any,
    /// The ACLs that apply to the resource named: LITERAL with that name or `*`, or PREFIXED
    /// with a prefix of it.
    Match,
    /// Exactly this pattern type (and the name, when given).
    Exactly(PatternType),
}

/// Which ACLs a describe or delete is about (Kafka's `AclBindingFilter`): each `None` matches
/// anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// The kind of resource.
    pub resource_type: Option<ResourceType>,
    /// The resource's name.
    pub name: Option<String>,
    /// How patterns match.
    pub pattern: PatternFilter,
    /// The principal.
    pub principal: Option<String>,
    /// The host.
    pub host: Option<String>,
    /// The operation.
    pub operation: Option<Operation>,
    /// Allow or deny.
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// Whether `acl` is one the filter names.
    #[must_use]
    pub fn matches(&self, acl: &Acl) -> bool {
        let same = |wanted: Option<&str>, have: &str| wanted.is_none_or(|w| w == have);
        let resource = match (self.pattern, self.name.as_deref()) {
            (PatternFilter::Match, Some(name)) => match acl.pattern_type {
                PatternType::Literal => acl.name == name || acl.name == "*",
                PatternType::Prefixed => name.starts_with(&acl.name),
            },
            (PatternFilter::Exactly(pattern), name) => {
                acl.pattern_type == pattern && same(name, &acl.name)
            }
            (_, name) => same(name, &acl.name),
        };
        resource
            && self.resource_type.is_none_or(|t| t == acl.resource_type)
            && same(self.principal.as_deref(), &acl.principal)
            && same(self.host.as_deref(), &acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }
}

/// Who asks to do what, to what.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `User:NAME`.
    pub principal: &'a str,
    /// The client's address (an ACL for one host applies only when it is known).
    pub host: Option<IpAddr>,
    /// The operation.
    pub operation: Operation,
    /// The kind of resource.
    pub resource_type: ResourceType,
    /// The resource's name (`kafka-cluster` for the cluster).
    pub name: &'a str,
}

/// Why a request was allowed or denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The principal is a super user.
    SuperUser,
    /// This ACL allowed it.
    AllowedBy(Acl),
    /// This ACL denied it.
    DeniedBy(Acl),
    /// No ACL names the resource, and `allow_everyone_if_no_acl_found` is set.
    NoAclForResource,
    /// ACLs name the resource (or everyone is not allowed by default), but none allows this.
    NoAllow,
}

/// An authorisation decision, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may go on.
    pub allowed: bool,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Reason::SuperUser => f.write_str("ALLOWED: a super user"),
            Reason::AllowedBy(acl) => write!(f, "ALLOWED by: {acl}"),
            Reason::DeniedBy(acl) => write!(f, "DENIED by: {acl}"),
            Reason::NoAclForResource => f.write_str(
                "ALLOWED: no ACL names the resource and allow_everyone_if_no_acl_found is set",
            ),
            Reason::NoAllow => f.write_str("DENIED: no ACL allows it"),
        }
    }
}

/// The ACLs with the broker's settings around them.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    /// The ACLs.
    pub acls: Arc<Acls>,
    /// Principals allowed everything (`User:admin`).
    pub super_users: Arc<Vec<String>>,
    /// Whether a resource no ACL names is open to all (Kafka's default, and ours: false).
    pub allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    /// The decision on `request`; see the module docs.
    #[must_use]
    pub fn authorize(&self, request: &Request<'_>) -> Decision {
        let decided = |allowed, reason| Decision { allowed, reason };
        if self
            .super_users
            .iter()
            .any(|user| user == request.principal)
        {
            return decided(true, Reason::SuperUser);
        }
        let mut naming = self
            .acls
            .iter()
            .filter(|acl| acl.names(request.resource_type, request.name))
            .peekable();
        if naming.peek().is_none() {
            return if self.allow_everyone_if_no_acl_found {
                decided(true, Reason::NoAclForResource)
            } else {
                decided(false, Reason::NoAllow)
            };
        }
        let mut allowed_by = None;
        for acl in naming {
            if !acl.applies_to(request.principal, request.host) || !acl.covers(request.operation) {
                continue;
            }
            match acl.permission {
                Permission::Deny => return decided(false, Reason::DeniedBy(acl.clone())),
                Permission::Allow => {
                    allowed_by.get_or_insert_with(|| acl.clone());
                }
            }
        }
        match allowed_by {
            Some(acl) => decided(true, Reason::AllowedBy(acl)),
            None => decided(false, Reason::NoAllow),
        }
    }

    /// Whether the request is allowed (see [`Self::authorize`]).
    #[must_use]
    pub fn allows(&self, request: &Request<'_>) -> bool {
        self.authorize(request).allowed
    }

    /// Whether `principal` may do `operation` to at least one resource of `resource_type`
    /// (Kafka's `authorizeByResourceType`, KIP-679: an idempotent producer id needs Write on
    /// some topic): an ALLOW for it that no DENY of the principal's covers — a DENY of the
    /// LITERAL `*`, or of a prefix of the ALLOW's name.
    #[must_use]
    pub fn allows_any(
        &self,
        principal: &str,
        host: Option<IpAddr>,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if self.super_users.iter().any(|user| user == principal) {
            return true;
        }
        let mine = |acl: &&Acl| {
            acl.resource_type == resource_type
                && acl.applies_to(principal, host)
                && acl.covers(operation)
        };
        let denies: Vec<&Acl> = self
            .acls
            .iter()
            .filter(mine)
            .filter(|acl| acl.permission == Permission::Deny)
            .collect();
        let denied = |allow: &Acl| {
            denies.iter().any(|deny| match deny.pattern_type {
                PatternType::Literal => deny.name == "*" || deny.name == allow.name,
                PatternType::Prefixed => allow.name.starts_with(&deny.name),
            })
        };
        let any_allow = self
            .acls
            .iter()
            .filter(mine)
            .any(|acl| acl.permission == Permission::Allow && !denied(acl));
        any_allow
            || (self.allow_everyone_if_no_acl_found
                && !self
                    .acls
                    .iter()
                    .any(|acl| acl.resource_type == resource_type))
    }
}

/// The file's records: its lines whole under `\0MBA` version 1 (a line is its own key), readable
/// by its owner only.
fn file() -> KeyedLines {
    KeyedLines::new(b"\0MBA", |line| line).owner_only()
}
