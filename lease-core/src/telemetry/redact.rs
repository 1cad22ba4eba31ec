//! Keeping passwords out of messages: the one URL redactor of the workspace.
//!
//! [`redact_url`] shows a store URL with its secrets replaced by `***`: the password of
//! `user:password@`, a NATS token (`nats://token@host`), and the values of query parameters
//! whose name looks like a secret (`password`, `sslpassword`, `token`, `secret`, `pwd`, …).
//! [`secrets`] lists those secrets, raw and percent-decoded, and [`scrub`] replaces them in any
//! text, for messages a driver built from the URL (which may quote the password decoded).
//!
//! When a URL is malformed, more is hidden rather than less: a password holding an unencoded
//! `/`, `?` or `#` still counts up to the last `@`, so an `@` in a path or query after a `:`
//! can hide more of the URL than the password. Nothing here panics, whatever the input.

/// The replacement shown for every secret.
const MASK: &str = "***";

/// Query parameters whose value is a secret: their name contains one of these (any case).
const SECRET_KEYS: [&str; 5] = ["pass", "pwd", "secret", "token", "credential"];

/// `url` with its password, token and password-like query values replaced by `***`.
///
/// A URL without secrets comes back unchanged. The input need not be a valid URL: a string
/// without `://` is read as `user:password@host…` all the same, so a mistyped URL never shows
/// its password either.
///
/// ```
/// use lease_core::telemetry::redact::redact_url;
///
/// assert_eq!(
///     redact_url("postgres://app:s3cr%21t@db:5432/leases?sslpassword=k3y&sslmode=require"),
///     "postgres://app:***@db:5432/leases?sslpassword=***&sslmode=require"
/// );
/// assert_eq!(redact_url("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
/// ```
pub fn redact_url(url: &str) -> String {
    let parts = Parts::of(url);
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.prefix);
    let mut rest = parts.rest;
    if let Some(user) = parts.userinfo {
        match user.secret {
            Secret::Password(_) => {
                out.push_str(user.name);
                out.push(':');
                out.push_str(MASK);
            }
            Secret::Token(_) => out.push_str(MASK),
            Secret::None => out.push_str(user.all),
        }
        out.push('@');
        rest = parts.after_userinfo;
    }
    match rest.split_once('?') {
        Some((before, query)) => {
            out.push_str(before);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let mut first = true;
            for pair in query.split('&') {
                if !first {
                    out.push('&');
                }
                first = false;
                match pair.split_once('=') {
                    Some((key, value)) if is_secret_key(key) && !value.is_empty() => {
                        out.push_str(key);
                        out.push('=');
                        out.push_str(MASK);
                    }
                    _ => out.push_str(pair),
                }
            }
            if let Some(fragment) = fragment {
                out.push('#');
                out.push_str(fragment);
            }
        }
        None => out.push_str(rest),
    }
    out
}

/// Every secret in `url`: the password (or NATS token) and the values of password-like query
/// parameters, each raw and, when it differs, percent-decoded. Empty when there is none.
///
/// For a URL whose password holds an unencoded `/`, `?` or `#`, both readings are listed (up
/// to the first such character and up to the last `@`).
pub fn secrets(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |s: &str| {
        if s.is_empty() {
            return;
        }
        for candidate in [s.to_owned(), percent_decode(s)] {
            if !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    };
    let parts = Parts::of(url);
    if let Some(user) = &parts.userinfo {
        match user.secret {
            Secret::Password(p) | Secret::Token(p) => push(p),
            Secret::None => {}
        }
    }
    // The well-formed reading too, when the malformed one was taken.
    let before = parts.rest.split(['/', '?', '#']).next().unwrap_or_default();
    if let Some((userinfo, _)) = before.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        push(password);
    }
    let rest = match parts.userinfo {
        Some(_) => parts.after_userinfo,
        None => parts.rest,
    };
    if let Some((_, query)) = rest.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && is_secret_key(key)
            {
                push(value);
            }
        }
    }
    out
}

/// `text` with every secret of `url` (see [`secrets`]) replaced by `***`, longest first.
///
/// For messages built from the URL by others, e.g. a driver's error that quotes it.
///
/// ```
/// use lease_core::telemetry::redact::scrub;
///
/// let url = "mysql://app:p%40ss@db/leases";
/// assert_eq!(scrub("access denied for app (password p@ss)", url), "access denied for app (password ***)");
/// ```
pub fn scrub(text: &str, url: &str) -> String {
    let mut list = secrets(url);
    list.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_owned();
    for secret in &list {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

/// What precedes the `@` of a URL.
struct UserInfo<'a> {
    /// All of it.
    all: &'a str,
    /// The user name (before the first `:`).
    name: &'a str,
    secret: Secret<'a>,
}

enum Secret<'a> {
    /// `user:password@`.
    Password(&'a str),
    /// `nats://token@`: a NATS user without a password is a token.
    Token(&'a str),
    None,
}

/// A URL split where its secrets are.
struct Parts<'a> {
    /// `scheme://`, or empty when there is none.
    prefix: &'a str,
    /// Everything after the prefix.
    rest: &'a str,
    userinfo: Option<UserInfo<'a>>,
    /// What follows the userinfo's `@` (valid when `userinfo` is set).
    after_userinfo: &'a str,
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Parts<'a> {
        let (prefix, scheme, rest) = match url.find("://") {
            Some(i) => (&url[..i + 3], &url[..i], &url[i + 3..]),
            None => ("", "", url),
        };
        // The userinfo ends at the last '@' before the path when there is one; otherwise, at
        // the last '@' of all (a password holding an unencoded '/', '?' or '#'), when what
        // precedes it has a ':'.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (at, well_formed) = match rest[..authority_end].rfind('@') {
            Some(at) => (Some(at), true),
            None => (rest.rfind('@'), false),
        };
        let Some(at) = at else {
            return Parts {
                prefix,
                rest,
                userinfo: None,
                after_userinfo: rest,
            };
        };
        let all = &rest[..at];
        let (name, secret) = match all.split_once(':') {
            Some((name, password)) if !password.is_empty() => (name, Secret::Password(password)),
            Some((name, _)) => (name, Secret::None),
            None if well_formed && is_token_scheme(scheme) && !all.is_empty() => {
                (all, Secret::Token(all))
            }
            None => (all, Secret::None),
        };
        if !well_formed && matches!(secret, Secret::None) {
            // An '@' in the path or query, and nothing before it that looks like a password.
            return Parts {
                prefix,
                rest,
                userinfo: None,
                after_userinfo: rest,
            };
        }
        Parts {
            prefix,
            rest,
            userinfo: Some(UserInfo { all, name, secret }),
            after_userinfo: &rest[at + 1..],
        }
    }
}

/// Schemes whose user name alone is a secret (NATS's token authentication).
fn is_token_scheme(scheme: &str) -> bool {
    scheme.eq_ignore_ascii_case("nats") || scheme.eq_ignore_ascii_case("tls")
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|k| key.contains(k))
}

/// `s` with `%XX` escapes decoded (invalid UTF-8 replaced); malformed escapes kept as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked() {
        assert_eq!(
            redact_url("postgres://user:hunter2@db.example:5432/leases"),
            "postgres://user:***@db.example:5432/leases"
        );
        assert_eq!(
            redact_url("redis://:hunter2@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("mongodb://app:s3cret@db1:27017,db2:27018/app?replicaSet=rs0"),
            "mongodb://app:***@db1:27017,db2:27018/app?replicaSet=rs0"
        );
        assert_eq!(secrets("mysql://root:pw@h:1/x"), ["pw"]);
    }

    #[test]
    fn percent_encoded_passwords_are_masked_and_known_decoded() {
        let url = "postgres://user:s3cr%21t%40x@host:5432/db";
        assert_eq!(redact_url(url), "postgres://user:***@host:5432/db");
        assert_eq!(secrets(url), ["s3cr%21t%40x", "s3cr!t@x"]);
        assert_eq!(
            scrub("refused s3cr!t@x and s3cr%21t%40x", url),
            "refused *** and ***"
        );
        // A '%' at the very end, or a bad escape, is kept as it is.
        assert_eq!(percent_decode("a%"), "a%");
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_decode("a%zz"), "a%zz");
        assert_eq!(percent_decode("a%41"), "aA");
    }

    #[test]
    fn password_parameters_are_masked() {
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=require&sslpassword=k3y&PassWord=x#frag"),
            "postgres://u@h/db?sslmode=require&sslpassword=***&PassWord=***#frag"
        );
        assert_eq!(
            redact_url("mongodb://h/?authSource=admin&token=abc"),
            "mongodb://h/?authSource=admin&token=***"
        );
        let url = "postgres://user:pw@h/db?sslpassword=k%33y";
        assert_eq!(redact_url(url), "postgres://user:***@h/db?sslpassword=***");
        assert_eq!(secrets(url), ["pw", "k%33y", "k3y"]);
    }

    #[test]
    fn nats_tokens_are_masked() {
        assert_eq!(
            redact_url("nats://s3cr3t-token@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        assert_eq!(secrets("nats://tok@h"), ["tok"]);
        // Elsewhere a lone user name is no secret.
        assert_eq!(
            redact_url("postgres://postgres@127.0.0.1:5432/test"),
            "postgres://postgres@127.0.0.1:5432/test"
        );
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "mysql://root@127.0.0.1:3306/test",
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1:6379/0?protocol=resp3&allow_volatile=1",
            "nats://127.0.0.1:4222?bucket=jobs",
            "sqlite:///var/lib/app/leases.db",
            "sqlite::memory:",
            "mongodb+srv://cluster0.example.net/?retryWrites=true",
            "postgres://h/db?application_name=a@b",
            "memory://",
            "",
        ] {
            assert_eq!(redact_url(url), url);
            assert!(secrets(url).is_empty(), "{url}");
        }
    }

    #[test]
    fn malformed_urls_never_show_their_password() {
        // A password holding '?', '/' or '#' unencoded.
        for (url, secret) in [
            ("postgres://user:pa?ss@host:bad/db", "pa?ss"),
            ("redis://u:se/cret@h:1/0", "se/cret"),
            ("mysql://u:a#b@h/db", "a#b"),
            ("user:hunter3@host", "hunter3"),
            ("nonsense:p@ss", "p"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{url} -> {shown}");
            assert!(secrets(url).iter().any(|s| s == secret), "{url}");
            assert!(!scrub(url, url).contains(secret), "{url}");
        }
        assert!(!redact_url("nonsense:p@ss").contains("p@ss"));
    }

    #[test]
    fn garbage_never_panics() {
        for url in [
            "://",
            "@",
            ":@",
            "a://@",
            "a://:@?",
            "?=&=&",
            "%",
            "%%%",
            "x://u:%E2%82@h",
            "x://\u{1F600}:\u{1F511}@h?pass=\u{1F511}#",
            "x://u:p@h?password",
            "x://u:p@h?&&password=&",
            "\u{0}\u{7f}",
        ] {
            let _ = redact_url(url);
            let _ = secrets(url);
            let _ = scrub(url, url);
        }
        assert_eq!(
            redact_url("x://\u{1F600}:\u{1F511}@h"),
            "x://\u{1F600}:***@h"
        );
    }
}
