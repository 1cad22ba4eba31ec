//! What a coordinator claims: a name, or one permit of a counted name.

use std::fmt;

use crate::store::error::Result;
use crate::store::permits::check_count;

/// A counted name: at most [`count`](Permits::count) holders of [`name`](Permits::name) at once.
/// Pass it wherever a name is taken ([`Coordinator::try_acquire`](crate::Coordinator::try_acquire),
/// [`acquire`](crate::Coordinator::acquire), [`run`](crate::Coordinator::run),
/// [`run_elected`](crate::Coordinator::run_elected)) to hold one permit instead of the name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Permits {
    name: String,
    count: u32,
}

impl Permits {
    /// At most `count` holders of `name` at once.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when `count` is 0 or more than
    /// [`MAX_PERMITS`](crate::backend::permits::MAX_PERMITS). The name is checked against the store
    /// when it is used (each store has its own longest name).
    pub fn new(name: impl Into<String>, count: u32) -> Result<Permits> {
        check_count(count)?;
        Ok(Permits {
            name: name.into(),
            count,
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many holders the name may have at once.
    pub fn count(&self) -> u32 {
        self.count
    }
}

/// What a coordinator claims: a name (a plain lease, at most one holder) or one permit of a
/// counted name. Made from a `&str`, a `String` or a [`Permits`], so every call that takes a
/// name takes either.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The plain lease of a name.
    Lease(String),
    /// One permit of a counted name.
    Permits(Permits),
}

impl Target {
    /// The name claimed.
    pub fn name(&self) -> &str {
        match self {
            Target::Lease(name) => name,
            Target::Permits(p) => p.name(),
        }
    }

    /// The permit count, for a counted name.
    pub fn permits(&self) -> Option<u32> {
        match self {
            Target::Lease(_) => None,
            Target::Permits(p) => Some(p.count()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Lease(name) => f.write_str(name),
            Target::Permits(p) => write!(f, "{} ({} permits)", p.name, p.count),
        }
    }
}

impl From<&str> for Target {
    fn from(name: &str) -> Target {
        Target::Lease(name.to_owned())
    }
}

impl From<&String> for Target {
    fn from(name: &String) -> Target {
        Target::Lease(name.clone())
    }
}

impl From<String> for Target {
    fn from(name: String) -> Target {
        Target::Lease(name)
    }
}

impl From<Permits> for Target {
    fn from(p: Permits) -> Target {
        Target::Permits(p)
    }
}

impl From<&Permits> for Target {
    fn from(p: &Permits) -> Target {
        Target::Permits(p.clone())
    }
}

impl From<&Target> for Target {
    fn from(t: &Target) -> Target {
        t.clone()
    }
}
