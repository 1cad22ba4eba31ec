//! One parameter of a store URL's query, for the backend that reads it.
//!
//! A store URL (e.g. `redis://host:6379?key_prefix=app:`) carries the backend's own settings in
//! its query, next to the ones its driver reads. A backend names the parameters it takes and
//! reads each with the typed readers here, so every backend spells a yes/no, a name or a choice
//! the same way and refuses a bad value with the same [`ParamError`]. The pairs are handed over
//! one at a time, in the order of the query, so the first bad one is the one reported.

use std::fmt;

/// One `name=value` pair of a store URL's query (`name` alone reads as an empty value).
///
/// ```
/// use lease_core::backend::UrlParam;
///
/// let pairs: Vec<UrlParam<'_>> = UrlParam::pairs("table=jobs&hints=off&&debug").collect();
/// assert_eq!(pairs.len(), 3);
/// assert_eq!(pairs[0].word()?, "jobs");
/// assert_eq!(pairs[1].one_of(&[("on", true), ("off", false)], "on or off")?, false);
/// assert_eq!((pairs[2].name, pairs[2].value), ("debug", ""));
/// assert!(pairs[2].flag()?); // a bare name is a yes
/// # Ok::<(), lease_core::backend::ParamError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlParam<'a> {
    /// The parameter's name, as written.
    pub name: &'a str,
    /// Its value, as written (empty when the pair has no `=`).
    pub value: &'a str,
}

impl<'a> UrlParam<'a> {
    /// The pair `name=value` (or `name`) of a query.
    pub fn parse(pair: &'a str) -> UrlParam<'a> {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        UrlParam { name, value }
    }

    /// The pairs of a query (the text after `?`), in order, skipping empty ones.
    pub fn pairs(query: &'a str) -> impl Iterator<Item = UrlParam<'a>> {
        query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(UrlParam::parse)
    }

    /// A yes/no: `1`, `true`, `yes` or nothing is yes; `0`, `false`, `no` is no.
    pub fn flag(self) -> Result<bool, ParamError> {
        match self.value {
            "1" | "true" | "yes" | "" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err(self.refuse("1 or 0")),
        }
    }

    /// A name-like value: anything but empty.
    pub fn word(self) -> Result<String, ParamError> {
        if self.value.is_empty() {
            return Err(self.refuse("a non-empty value"));
        }
        Ok(self.value.to_owned())
    }

    /// One of several spellings, each standing for a value; `expected` lists them for the
    /// error (e.g. `"on or off"`).
    pub fn one_of<T: Copy>(
        self,
        choices: &[(&str, T)],
        expected: &'static str,
    ) -> Result<T, ParamError> {
        choices
            .iter()
            .find(|(spelling, _)| *spelling == self.value)
            .map(|&(_, value)| value)
            .ok_or_else(|| self.refuse(expected))
    }

    /// The error refusing this pair's value, saying what the parameter takes.
    pub fn refuse(self, expected: &'static str) -> ParamError {
        ParamError {
            name: self.name.to_owned(),
            value: self.value.to_owned(),
            expected,
        }
    }
}

/// A URL parameter with a value its backend cannot take. Its message is
/// `"{name} takes {expected}, not '{value}'"`; the caller adds which URL it came from.
///
/// ```
/// use lease_core::backend::UrlParam;
///
/// let e = UrlParam::parse("allow_volatile=2").flag().unwrap_err();
/// assert_eq!((e.name.as_str(), e.value.as_str(), e.expected), ("allow_volatile", "2", "1 or 0"));
/// assert_eq!(e.to_string(), "allow_volatile takes 1 or 0, not '2'");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParamError {
    /// The parameter's name.
    pub name: String,
    /// The value given.
    pub value: String,
    /// What the parameter takes.
    pub expected: &'static str,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} takes {}, not '{}'",
            self.name, self.expected, self.value
        )
    }
}

impl std::error::Error for ParamError {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn readers_take_their_spellings_and_refuse_the_rest() {
        for yes in ["1", "true", "yes", ""] {
            assert!(
                UrlParam {
                    name: "f",
                    value: yes
                }
                .flag()
                .unwrap()
            );
        }
        for no in ["0", "false", "no"] {
            assert!(
                !UrlParam {
                    name: "f",
                    value: no
                }
                .flag()
                .unwrap()
            );
        }
        assert_eq!(
            UrlParam::parse("f=on").flag().unwrap_err().expected,
            "1 or 0"
        );
        assert_eq!(
            UrlParam::parse("table=").word().unwrap_err().to_string(),
            "table takes a non-empty value, not ''"
        );
        let choices = [("counter", 0), ("clock_floor", 1)];
        assert_eq!(
            UrlParam::parse("terms=clock_floor")
                .one_of(&choices, "counter or clock_floor")
                .unwrap(),
            1
        );
        assert!(UrlParam::parse("terms=x").one_of(&choices, "…").is_err());
        assert_eq!(UrlParam::pairs("&a=1&&b").count(), 2);
        assert_eq!(UrlParam::parse("a=b=c").value, "b=c");
    }
}
