//! `lease members SERVICE [--json]`: the live members of a service, by the store's clock.

use lease::LeaseStore;
use lease::backend::membership::Member;

use crate::cli::MembersArgs;
use crate::commands::output::{self, json_string, printable};
use crate::commands::{Named, open_group_for};
use crate::duration::human;
use crate::exit::CliError;
use crate::redact::eprintln_scrubbed;
use crate::store_url::StoreUrl;

/// Runs the `members` subcommand: one store read ([`lease::MembershipStore::members`]).
pub(crate) async fn members(url: &StoreUrl, args: MembersArgs) -> Result<u8, CliError> {
    let store = open_group_for(url, Named::Service, &args.service).await?;
    // `open_group_for` refused a store without it.
    let Some(records) = store.membership_store() else {
        return Err(lease::Error::unsupported(format!(
            "the {} store keeps no membership records",
            store.backend()
        ))
        .into());
    };
    let mut members = records.members(&args.service).await?;
    // The contract's order already; kept whatever a store does, as the help documents it.
    members.sort_by(|a, b| a.node.cmp(&b.node));
    let text = if args.json {
        json(&members)
    } else {
        table(&members)
    };
    output::write_stdout(&text, "the members")?;
    if members.is_empty() {
        eprintln_scrubbed(&format!(
            "lease: service '{}' has no live members (none has heartbeated within its TTL, by \
             the store's clock)",
            printable(&args.service)
        ));
    }
    Ok(0)
}

/// The members as an aligned table under a header (`NODE  ADDRESS  GROUPS  EXPIRES IN`); groups
/// comma-separated, `-` for an empty address or no groups. Nothing at all when there is no
/// member.
pub(crate) fn table(members: &[Member]) -> String {
    if members.is_empty() {
        return String::new();
    }
    let mut cells = vec![[
        "NODE".to_owned(),
        "ADDRESS".to_owned(),
        "GROUPS".to_owned(),
        "EXPIRES IN".to_owned(),
    ]];
    for m in members {
        let or_dash = |s: String| if s.is_empty() { "-".to_owned() } else { s };
        cells.push([
            printable(&m.node),
            or_dash(printable(&m.address)),
            or_dash(
                m.groups
                    .iter()
                    .map(|g| printable(g))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            human(m.expires_in),
        ]);
    }
    output::table(&cells)
}

/// The members as a JSON array: `node`, `address` (a string, possibly empty), `groups` (an
/// array of strings) and `expires_in_ms`.
pub(crate) fn json(members: &[Member]) -> String {
    let items: Vec<String> = members
        .iter()
        .map(|m| {
            let groups: Vec<String> = m.groups.iter().map(|g| json_string(g)).collect();
            format!(
                "{{\"node\":{},\"address\":{},\"groups\":[{}],\"expires_in_ms\":{}}}",
                json_string(&m.node),
                json_string(&m.address),
                groups.join(","),
                m.expires_in.as_millis()
            )
        })
        .collect();
    output::json_array(&items)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn members() -> Vec<Member> {
        vec![
            Member {
                node: "node-a".to_owned(),
                address: "10.0.0.7:8080".to_owned(),
                groups: vec!["orders".to_owned(), "mail".to_owned()],
                expires_in: Duration::from_millis(12_400),
            },
            Member {
                node: "node-b \"2\"".to_owned(),
                address: String::new(),
                groups: Vec::new(),
                expires_in: Duration::from_millis(900),
            },
        ]
    }

    #[test]
    fn table_is_aligned_with_dashes_for_nothing() {
        assert_eq!(
            table(&members()),
            "NODE          ADDRESS        GROUPS       EXPIRES IN\n\
             node-a        10.0.0.7:8080  orders,mail  12.4s\n\
             node-b \\\"2\\\"  -              -            900ms\n"
        );
        assert_eq!(table(&[]), "");
    }

    #[test]
    fn json_has_every_field() {
        assert_eq!(
            json(&members()),
            "[{\"node\":\"node-a\",\"address\":\"10.0.0.7:8080\",\"groups\":[\"orders\",\"mail\"],\"expires_in_ms\":12400},\
             {\"node\":\"node-b \\\"2\\\"\",\"address\":\"\",\"groups\":[],\"expires_in_ms\":900}]\n"
        );
        assert_eq!(json(&[]), "[]\n");
    }
}
