//! `lease release NAME --force`: an administrator's break of a lease. Unsafe by nature.

use std::io::Write;

use lease::ErrorKind;

use crate::cli::ReleaseArgs;
use crate::commands::open_for;
use crate::exit::{CliError, Exit};
use crate::store_url::StoreUrl;

/// Runs the `release` subcommand: ends whoever's live lease on the name, keeping its term so
/// the next claim gets a higher one.
pub(crate) async fn release(url: &StoreUrl, args: ReleaseArgs) -> Result<u8, CliError> {
    if !args.force {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "refusing to break lease '{}' without --force: its holder may still be working \
                 and would overlap with the next one until its renewal fails",
                args.name
            ),
        ));
    }
    let names = [args.name];
    let store = open_for(url, &names).await?;
    let [name] = names;
    let before = store.get(&name).await?.filter(|i| i.live);
    let ended = store.force_release(&name).await.map_err(|e| {
        if e.is(ErrorKind::Unsupported) {
            CliError::lease_with(Exit::StoreRefused, &e)
        } else {
            CliError::from_lease(&e)
        }
    })?;
    let text = match (ended, before) {
        (true, Some(info)) => format!(
            "released '{name}': ended term {} of {}; the next claim gets a higher term\n",
            info.term, info.instance
        ),
        (true, None) => {
            format!("released '{name}': ended its live lease; the next claim gets a higher term\n")
        }
        (false, _) => format!("'{name}' was not held; nothing to release\n"),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| CliError::new(Exit::StoreError, format!("cannot write the result: {e}")))?;
    Ok(0)
}
