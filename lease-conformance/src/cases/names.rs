//! The listing of names under a prefix: exactly the names that start with it, byte for byte,
//! in byte order, in pages, with every character of the prefix taken literally.

use std::time::Duration;

use lease_core::backend::HolderToken;
use lease_core::backend::names::{ListedName, MAX_NAMES_PER_PAGE, NamePage};
use lease_core::{ErrorKind, LeaseStore};

use crate::Harness;

/// The characters special in some backend's query language: SQL `LIKE`'s `%` and `_`, Redis
/// glob's `*`, `?`, `[`, `]` and `\`, NATS subjects' `.`, `*` and `>`, and the key escapes of
/// Redis (`{`, `}`) and NATS (`=`).
const SPECIALS: &str = "%_*?[]\\.>{}=";

async fn page(h: &Harness, prefix: &str, after: Option<&str>, limit: usize) -> NamePage {
    match h.store.names(prefix, after, limit).await {
        Ok(p) => p,
        Err(e) => panic!(
            "{}: names({prefix:?}, {after:?}, {limit}) failed: {e}",
            h.backend()
        ),
    }
}

fn names_of(page: &NamePage) -> Vec<&str> {
    page.names.iter().map(|n| n.name.as_str()).collect()
}

/// Under a prefix holding every special character, the listing answers exactly the names that
/// start with it — the name equal to the prefix among them, and none of the names that differ
/// from it in one special character (which a wildcard would match) or stop short of it — in
/// byte order, each with its kinds (plain lease, counted name); it pages with `after` and
/// `more`; a released lease shows where the store keeps ended records; the empty listing of an
/// unused prefix has no `more`; a bad prefix or limit is refused with its typed kind.
pub async fn names_under_a_prefix_are_listed_literally_in_byte_order(h: &Harness) {
    let case = "names_under_a_prefix_are_listed_literally_in_byte_order";
    let store = h.store.as_ref();
    if !h.caps().list_names {
        let e = store.names(&h.prefix, None, 10).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{}: {e}", h.backend());
        h.not_applicable_loudly(case, "the store cannot list its names");
        return;
    }
    // Long enough that no lease ends while the case lists (where the store removes ended
    // records, an expired name would drop out), unless the store keeps one TTL only.
    let ttl = match h.caps().fixed_ttl {
        Some(_) => h.ttl,
        None => Duration::from_secs(30),
    };
    let q = h.name(&format!("s{SPECIALS}"));
    let mut under = vec![
        q.clone(),
        format!("{q}a"),
        format!("{q}é"),
        format!("{q}/b"),
        format!("{q}{SPECIALS}"),
    ];
    // Not under `q`: each special character in turn replaced, `q` cut short, a neighbour.
    let mut outside: Vec<String> = SPECIALS
        .char_indices()
        .map(|(i, _)| {
            let mut s = SPECIALS.to_owned();
            s.replace_range(i..i + 1, "X");
            h.name(&format!("s{s}"))
        })
        .collect();
    outside.push(h.name(&format!("s{}", &SPECIALS[..SPECIALS.len() - 1])));
    outside.push(h.name("t"));
    outside.push(h.name("S%_*?[]\\.>{}="));
    let mut holders = Vec::new();
    for name in under.iter().chain(&outside) {
        let holder = HolderToken::mint();
        match store.claim(name, &holder, "names", ttl).await {
            Ok(Some(_)) => holders.push((name.clone(), holder)),
            other => panic!("{}: claim of {name:?}: {other:?}", h.backend()),
        }
    }
    let counted = format!("{q}c");
    let both = format!("{q}a");
    if store.permit_store().is_some() {
        for name in [&counted, &both] {
            let holder = HolderToken::mint();
            let got = lease_core::backend::LeaseStoreExt::claim_permit(
                store, name, 2, &holder, "names", ttl,
            )
            .await;
            assert!(
                matches!(got, Ok(Some(_))),
                "{}: permit claim of {name:?}: {got:?}",
                h.backend()
            );
        }
        under.push(counted.clone());
    }
    let released = format!("{q}r");
    let holder = HolderToken::mint();
    assert!(matches!(
        store.claim(&released, &holder, "names", ttl).await,
        Ok(Some(_))
    ));
    assert!(store.release(&released, &holder).await.unwrap());
    let keeps = h.caps().keeps_ended_records;
    if keeps {
        under.push(released.clone());
    }
    under.sort();

    let all = page(h, &q, None, MAX_NAMES_PER_PAGE).await;
    let mut listed = names_of(&all);
    if !keeps {
        // Whether a released lease still shows is the store's (its server removes ended
        // records in its own time).
        listed.retain(|n| *n != released);
    }
    assert_eq!(
        listed,
        under.iter().map(String::as_str).collect::<Vec<_>>(),
        "{}: the names under {q:?}, in byte order (a name outside the prefix, or a special \
         character taken as a wildcard, shows as an extra name)",
        h.backend()
    );
    assert!(!all.more, "{}: more after every name", h.backend());
    for n in &all.names {
        let want = ListedName {
            name: n.name.clone(),
            lease: n.name != counted,
            counted: n.name == counted || (n.name == both && store.permit_store().is_some()),
        };
        assert_eq!(*n, want, "{}: the kinds of {:?}", h.backend(), n.name);
    }

    // Pages of two, each starting after the last name of the one before.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let p = page(h, &q, after.as_deref(), 2).await;
        assert!(
            p.names.len() <= 2,
            "{}: a page of 2 holds {:?}",
            h.backend(),
            p
        );
        paged.extend(p.names.iter().map(|n| n.name.clone()));
        if !p.more {
            break;
        }
        assert!(paged.len() < 100, "{}: paging does not end", h.backend());
        after = paged.last().cloned();
    }
    assert_eq!(
        paged,
        names_of(&all),
        "{}: the pages of 2, one after the other, are the whole listing",
        h.backend()
    );

    // The case's own prefix: every name of the case, and nothing of the other cases'.
    let mine = page(h, &h.prefix, None, MAX_NAMES_PER_PAGE).await;
    assert!(
        mine.names.iter().all(|n| n.name.starts_with(&h.prefix)),
        "{}: a name outside {:?} listed: {:?}",
        h.backend(),
        h.prefix,
        names_of(&mine)
    );
    for name in &outside {
        assert!(
            mine.names.iter().any(|n| n.name == *name),
            "{}: {name:?} is not listed under {:?}",
            h.backend(),
            h.prefix
        );
    }

    let none = page(h, &h.name("nothing-here/"), None, 10).await;
    assert_eq!(
        none,
        NamePage::default(),
        "{}: an unused prefix",
        h.backend()
    );

    let e = store.names("a\u{7}", None, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName, "{}: {e}", h.backend());
    assert!(e.to_string().contains("prefix"), "{}: {e}", h.backend());
    let e = store
        .names(&q, None, MAX_NAMES_PER_PAGE + 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{}: {e}", h.backend());

    for (name, holder) in holders {
        let _ = store.release(&name, &holder).await;
    }
}
