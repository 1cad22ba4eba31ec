//! `lease owners GROUP [--json]`: the live partition leases of a group, by the store's clock.

use lease::LeaseStore;
use lease::backend::partitions::PartitionLease;

use crate::cli::OwnersArgs;
use crate::commands::output::{self, json_string, printable};
use crate::commands::{Named, open_group_for};
use crate::duration::human;
use crate::exit::CliError;
use crate::redact::eprintln_scrubbed;
use crate::store_url::StoreUrl;

/// Runs the `owners` subcommand: one store read ([`lease::PartitionStore::owners`]).
pub(crate) async fn owners(url: &StoreUrl, args: OwnersArgs) -> Result<u8, CliError> {
    let store = open_group_for(url, Named::Group, &args.group).await?;
    // `open_group_for` refused a store without it.
    let Some(records) = store.partition_store() else {
        return Err(lease::Error::unsupported(format!(
            "the {} store keeps no partition leases",
            store.backend()
        ))
        .into());
    };
    let mut leases = records.owners(&args.group).await?;
    // The contract's order already; kept whatever a store does, as the help documents it.
    leases.sort_by_key(|l| l.partition);
    let text = if args.json {
        json(&leases)
    } else {
        table(&leases)
    };
    output::write_stdout(&text, "the owners")?;
    if leases.is_empty() {
        eprintln_scrubbed(&format!(
            "lease: group '{}' has no live partition leases (none is held within its TTL, by \
             the store's clock)",
            printable(&args.group)
        ));
    }
    Ok(0)
}

/// The leases as an aligned table under a header (`PARTITION  OWNER  EPOCH  EXPIRES IN`).
/// Nothing at all when there is no lease.
pub(crate) fn table(leases: &[PartitionLease]) -> String {
    if leases.is_empty() {
        return String::new();
    }
    let mut cells = vec![[
        "PARTITION".to_owned(),
        "OWNER".to_owned(),
        "EPOCH".to_owned(),
        "EXPIRES IN".to_owned(),
    ]];
    for l in leases {
        cells.push([
            l.partition.to_string(),
            printable(&l.owner),
            l.epoch.to_string(),
            human(l.expires_in),
        ]);
    }
    output::table(&cells)
}

/// The leases as a JSON array: `partition`, `owner`, `epoch` and `expires_in_ms`.
pub(crate) fn json(leases: &[PartitionLease]) -> String {
    let items: Vec<String> = leases
        .iter()
        .map(|l| {
            format!(
                "{{\"partition\":{},\"owner\":{},\"epoch\":{},\"expires_in_ms\":{}}}",
                l.partition,
                json_string(&l.owner),
                l.epoch,
                l.expires_in.as_millis()
            )
        })
        .collect();
    output::json_array(&items)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn leases() -> Vec<PartitionLease> {
        vec![
            PartitionLease {
                partition: 0,
                owner: "node-a@3f9c0e1d2b4a5968".to_owned(),
                epoch: 4,
                expires_in: Duration::from_millis(14_200),
            },
            PartitionLease {
                partition: 11,
                owner: "b".to_owned(),
                epoch: 12,
                expires_in: Duration::from_secs(75),
            },
        ]
    }

    #[test]
    fn table_is_aligned() {
        assert_eq!(
            table(&leases()),
            "PARTITION  OWNER                    EPOCH  EXPIRES IN\n\
             0          node-a@3f9c0e1d2b4a5968  4      14.2s\n\
             11         b                        12     1m15s\n"
        );
        assert_eq!(table(&[]), "");
    }

    #[test]
    fn json_has_every_field() {
        assert_eq!(
            json(&leases()),
            "[{\"partition\":0,\"owner\":\"node-a@3f9c0e1d2b4a5968\",\"epoch\":4,\"expires_in_ms\":14200},\
             {\"partition\":11,\"owner\":\"b\",\"epoch\":12,\"expires_in_ms\":75000}]\n"
        );
        assert_eq!(json(&[]), "[]\n");
    }
}
