//! Fenced updates on MongoDB: the fence is a field of the document itself, and the update's
//! filter admits only a token at least the document's.
//!
//! A fenced update of a document adds to the caller's filter "the fence field is at most the
//! token, or missing" and to the caller's update `$set: {<fence field>: token}`, and sends the
//! one `update` command: the server applies it only to a document whose fence admits the
//! token, atomically per document. When it matched nothing, one more read (on that path only)
//! tells a refusal ([`FenceError::Stale`], the document's fence above the token) from a filter
//! that matches no document (`Ok`, with nothing matched). A fence field that holds something
//! other than a token (a string, a fraction) is a `Schema` error, never a silent "matched
//! nothing".
//!
//! [`MongoFence::upsert_by_id`] inserts the document when no document has its `_id`: a refused
//! upsert meets the existing `_id` and fails as a duplicate key, which is read as the refusal
//! it is; an upsert that meets a duplicate `_id` whose fence admits its token lost a race with
//! another first insert, and is sent again (it then updates the document that won). Upsert only by `_id` (or another unique key): with a filter that no unique index
//! covers, a refused upsert would insert a second document.
//!
//! **What it cannot do.** The fence is per document: a write that spans documents is fenced
//! document by document, not as a whole (MongoDB's multi-document transactions are not used).
//! A write that changes the fence field by other means, or removes the document, takes the
//! fence with it. Tokens are stored as BSON `int64`: a token above `i64::MAX` is refused with
//! `InvalidArgument`. **It has been run on the project's MongoDB wire emulator only**, which
//! executes one command at a time: the race test there shows the logic, not a real server's
//! concurrency.

use lease_core::{Error, Result};
use mongodb::Collection;
use mongodb::bson::{Bson, Document, doc};
use mongodb::results::UpdateResult;

use crate::error::{FenceError, Stale};

/// The fence field's default name.
pub const DEFAULT_FIELD: &str = "_fence";

/// Fenced updates of documents in the application's own collections (see the [module
/// docs](self) for the command and what it guarantees).
///
/// ```no_run
/// # async fn f(orders: mongodb::Collection<mongodb::bson::Document>, term: lease_core::Term)
/// # -> Result<(), lease_fence::FenceError> {
/// use lease_fence::mongo::MongoFence;
/// use mongodb::bson::doc;
///
/// let fence = MongoFence::new();
/// fence
///     .update_one(&orders, doc! { "_id": 7 }, doc! { "$set": { "paid": true } }, term.token())
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MongoFence {
    field: String,
    compare: bool,
}

impl Default for MongoFence {
    fn default() -> Self {
        MongoFence::new()
    }
}

impl MongoFence {
    /// Fences kept in the field [`DEFAULT_FIELD`] of each document.
    pub fn new() -> MongoFence {
        MongoFence {
            field: DEFAULT_FIELD.to_owned(),
            compare: true,
        }
    }

    /// Fences kept in the field `field`: a top-level field name, not empty, without `.` and
    /// not starting with `$`; `InvalidName` otherwise.
    pub fn with_field(field: &str) -> Result<MongoFence> {
        if field.is_empty()
            || field.contains('.')
            || field.starts_with('$')
            || field.chars().any(char::is_control)
            || field == "_id"
        {
            return Err(Error::invalid_name(format!(
                "{field:?} cannot hold a fence: use a plain top-level field name (not empty, \
                 not `_id`, no `.`, not starting with `$`), such as {DEFAULT_FIELD:?}"
            )));
        }
        Ok(MongoFence {
            field: field.to_owned(),
            compare: true,
        })
    }

    /// Test support: the same fence with its check left out — the update's filter does not
    /// look at the fence field, as a writer that does not compare tokens would. Tests use it
    /// to show that their zombie's update gets through without the check. Never use it for
    /// data.
    #[doc(hidden)]
    pub fn break_check_for_tests(mut self) -> MongoFence {
        self.compare = false;
        self
    }

    /// The fence field's name.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Applies `update` (an update document of operators: `$set`, `$inc`, …) to the first
    /// document matching `filter`, only if its fence admits `token`, and sets its fence to
    /// `token`: one `update` command (and one read when it matched nothing).
    ///
    /// [`FenceError::Stale`] when a document matches `filter` but its fence is above `token`
    /// (nothing changed); `Ok` with nothing matched when no document matches `filter`;
    /// `InvalidArgument` for a token of 0 or above `i64::MAX`, an update that is not one of
    /// operators, or one that sets the fence field itself — before any I/O. MongoDB's errors are
    /// mapped as lease-mongo maps its own (`lease_mongo::classify`).
    pub async fn update_one(
        &self,
        coll: &Collection<Document>,
        filter: Document,
        update: Document,
        token: u64,
    ) -> Result<UpdateResult, FenceError> {
        self.fenced(coll, filter, update, token, false).await
    }

    /// As [`update_one`](MongoFence::update_one) on the document whose `_id` is `id`, inserting
    /// it (with `id` and the fence) when there is none.
    pub async fn upsert_by_id(
        &self,
        coll: &Collection<Document>,
        id: impl Into<Bson>,
        update: Document,
        token: u64,
    ) -> Result<UpdateResult, FenceError> {
        self.fenced(coll, doc! { "_id": id.into() }, update, token, true)
            .await
    }

    async fn fenced(
        &self,
        coll: &Collection<Document>,
        filter: Document,
        update: Document,
        token: u64,
        upsert: bool,
    ) -> Result<UpdateResult, FenceError> {
        crate::check::token(token)?;
        let stored = stored_token(token)?;
        let update = self.with_fence(update, stored)?;
        let fenced_filter = if self.compare {
            doc! { "$and": [
                filter.clone(),
                { "$or": [
                    { &self.field: { "$lte": stored } },
                    { &self.field: { "$exists": false } },
                ] },
            ] }
        } else {
            filter.clone()
        };
        let doing = format!("fenced update in {}", coll.name());
        // An upsert that meets a duplicate `_id` whose fence admits the token lost a race with
        // another insert of the same document: the document exists now, so the update is sent
        // again (at most `UPSERT_TRIES` times in all) and meets it.
        let mut tries = 0;
        let refused_by = loop {
            tries += 1;
            let answer = coll
                .update_one(fenced_filter.clone(), update.clone())
                .upsert(upsert)
                .await;
            match answer {
                Ok(done) if done.matched_count > 0 || done.upserted_id.is_some() => {
                    return Ok(done);
                }
                Ok(done) => match self.fence_of(coll, &filter, &doing).await? {
                    Seen::Fence(fence) if fence > token => break fence,
                    // No document matches the filter (or its fence admits the token now: a
                    // write that raced this one lowered nothing, so "matched nothing" stands).
                    _ => return Ok(done),
                },
                Err(e) if upsert && lease_mongo::is_duplicate_id(&e) => {
                    match self.fence_of(coll, &filter, &doing).await? {
                        Seen::Fence(fence) if fence > token => break fence,
                        _ if tries < UPSERT_TRIES => continue,
                        _ => return Err(lease_mongo::classify(e, &doing).into()),
                    }
                }
                Err(e) => return Err(lease_mongo::classify(e, &doing).into()),
            }
        };
        let resource = format!("{}:{}", coll.name(), filter);
        Err(FenceError::Stale(Stale::new(&resource, token, refused_by)))
    }

    /// `update` with `$set: {<field>: token}` added.
    fn with_fence(&self, mut update: Document, token: i64) -> Result<Document> {
        if update.is_empty() || !update.keys().all(|k| k.starts_with('$')) {
            return Err(Error::invalid_argument(
                "a fenced update takes an update document of operators (`$set`, `$inc`, …), not \
                 a replacement document",
            ));
        }
        let touches_fence = update.values().any(|v| match v {
            Bson::Document(d) => d
                .keys()
                .any(|k| k == &self.field || k.starts_with(&format!("{}.", self.field))),
            _ => false,
        });
        if touches_fence {
            return Err(Error::invalid_argument(format!(
                "the update changes the fence field `{}` itself; leave it to the fence",
                self.field
            )));
        }
        match update.get_mut("$set") {
            Some(Bson::Document(set)) => {
                set.insert(self.field.clone(), token);
            }
            Some(_) => {
                return Err(Error::invalid_argument(
                    "the update's `$set` is not a document",
                ));
            }
            None => {
                update.insert("$set", doc! { &self.field: token });
            }
        }
        Ok(update)
    }

    /// What the first document matching `filter` holds in the fence field. A value that is
    /// not a token (a string, a fraction, a negative number) is a `Schema` error: the filter
    /// compares it by BSON's rules, so a fence written by something other than this fence
    /// could refuse or admit a token by accident, and a refusal would pass for "no document".
    async fn fence_of(
        &self,
        coll: &Collection<Document>,
        filter: &Document,
        doing: &str,
    ) -> Result<Seen> {
        let found = coll
            .find_one(filter.clone())
            .projection(doc! { &self.field: 1 })
            .await
            .map_err(|e| lease_mongo::classify(e, doing))?;
        let Some(found) = found else {
            return Ok(Seen::Missing);
        };
        let value = match found.get(&self.field) {
            None => return Ok(Seen::Unfenced),
            Some(v) => v,
        };
        let token = match value {
            Bson::Int64(t) => u64::try_from(*t).ok(),
            Bson::Int32(t) => u64::try_from(*t).ok(),
            // A whole double (a shell's `5`) compares as the integer it is.
            Bson::Double(t) if t.fract() == 0.0 && *t >= 0.0 && *t <= 2f64.powi(53) => {
                Some(*t as u64)
            }
            _ => None,
        };
        token.map(Seen::Fence).ok_or_else(|| {
            Error::schema(format!(
                "{doing}: the document matching {filter} holds {value} in its fence field `{}`, \
                 which is not a fencing token (a non-negative integer); the field belongs to \
                 the fence: let nothing else write it, or fence with another field \
                 (`MongoFence::with_field`)",
                self.field
            ))
        })
    }

    /// The fence of the document whose `_id` is `id`: the highest token that has written it,
    /// `None` when there is no such document or it was never written under a fence; a `Schema`
    /// error when its fence field holds something that is not a token. For monitoring and
    /// tests: a write never needs it.
    pub async fn token(
        &self,
        coll: &Collection<Document>,
        id: impl Into<Bson>,
    ) -> Result<Option<u64>> {
        let doing = format!("read the fence in {}", coll.name());
        Ok(
            match self
                .fence_of(coll, &doc! { "_id": id.into() }, &doing)
                .await?
            {
                Seen::Fence(token) => Some(token),
                Seen::Missing | Seen::Unfenced => None,
            },
        )
    }
}

/// How many times an upsert is sent when it keeps meeting a duplicate `_id` that admits its
/// token (another insert of the same document won each race).
const UPSERT_TRIES: u32 = 3;

/// What a document holds in the fence field.
enum Seen {
    /// No document matches the filter.
    Missing,
    /// The document has no fence field: never written under a fence.
    Unfenced,
    /// The highest token that has written the document.
    Fence(u64),
}

/// A token as BSON stores it: an `int64`.
fn stored_token(token: u64) -> Result<i64> {
    i64::try_from(token).map_err(|_| {
        Error::invalid_argument(format!(
            "fencing token {token} is above {}, the largest a BSON int64 holds; fence with a \
             store whose tokens fit",
            i64::MAX
        ))
    })
}
