//! What the read-only commands (`status`, `members`, `owners`) share in their output: aligned
//! tables, JSON strings, and writing to stdout.

use std::io::Write;

use crate::exit::{CliError, Exit};

/// `rows` as an aligned table: the first row is the header. Columns are left-aligned and
/// separated by two spaces; the last one is not padded and no line ends in a space. No rows
/// at all give an empty string.
pub(crate) fn table<R: AsRef<[String]>>(rows: &[R]) -> String {
    let n = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .map(|r| r.as_ref().get(c).map_or(0, |cell| cell.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.as_ref().iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if c + 1 < n {
                let pad = widths[c].saturating_sub(cell.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `s` as a JSON string, quotes included.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// JSON objects (each already rendered) as one JSON array on one line, as `status --json`
/// prints it: `[{…},{…}]`, or `[]`.
pub(crate) fn json_array(items: &[String]) -> String {
    format!("[{}]\n", items.join(","))
}

/// `s` with characters that would break a table row escaped.
pub(crate) fn printable(s: &str) -> String {
    s.chars().flat_map(char::escape_debug).collect::<String>()
}

/// Writes `text` to stdout; `what` names it in the error.
pub(crate) fn write_stdout(text: &str, what: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::new(Exit::StoreError, format!("cannot write {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_never_end_in_spaces() {
        let rows = [
            ["A".to_owned(), "BB".to_owned(), "C".to_owned()],
            ["long one".to_owned(), "".to_owned(), "x".to_owned()],
            ["é".to_owned(), "b".to_owned(), "".to_owned()],
        ];
        assert_eq!(
            table(&rows),
            "A         BB  C\nlong one      x\né         b\n"
        );
        assert_eq!(table::<[String; 3]>(&[]), "");
    }

    #[test]
    fn json_strings_escape() {
        assert_eq!(json_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(json_array(&[]), "[]\n");
        assert_eq!(json_array(&["1".to_owned(), "2".to_owned()]), "[1,2]\n");
    }
}
