//! What commands print for a terminal: aligned tables.

use std::fmt::Write as _;

use vigil_engine::discovery_preview::{DatabaseState, DiscoveryPreview, PreviewContext};

/// The preview as text for a terminal: sources, database, a table of the
/// contexts, the updates field by field, clashes, malformed files and counts.
pub fn discovery_preview(preview: &DiscoveryPreview) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Dry run: nothing is written.");
    let files = if preview.sources.files.is_empty() {
        "none".to_owned()
    } else {
        preview.sources.files.join(", ")
    };
    let _ = writeln!(out, "Kubeconfig files: {files}");
    if let Some(dir) = &preview.sources.dir {
        let _ = writeln!(out, "Kubeconfig directory: {dir}");
    }
    let database = match preview.database.state {
        DatabaseState::Existing => "exists; the plan is what `vigil serve` would write to it",
        DatabaseState::Missing => {
            "does not exist (and was not created): every context would be inserted"
        }
        DatabaseState::Blank => "holds no table yet: every context would be inserted",
        DatabaseState::InMemory => "in memory, empty at start: every context would be inserted",
    };
    let _ = writeln!(out, "Database: {} — {database}", preview.database.url);
    let _ = writeln!(out);

    if preview.contexts.is_empty() {
        let _ = writeln!(out, "No context found.");
    } else {
        let rows: Vec<[String; 5]> = preview
            .contexts
            .iter()
            .map(|c| {
                let action = if c.changes.is_empty() {
                    c.action.label().to_owned()
                } else {
                    let fields: Vec<&str> = c.changes.iter().map(|f| f.field).collect();
                    format!("{} ({})", c.action.label(), fields.join(", "))
                };
                [
                    c.name.clone(),
                    c.endpoint.clone(),
                    action,
                    c.source_file.clone(),
                    c.probeability.clone(),
                ]
            })
            .collect();
        let header = ["CONTEXT", "ENDPOINT", "PLAN", "SOURCE", "PROBEABILITY"].map(str::to_owned);
        write_table(&mut out, &header, &rows);
    }

    let updates: Vec<&PreviewContext> = preview
        .contexts
        .iter()
        .filter(|c| !c.changes.is_empty())
        .collect();
    if !updates.is_empty() {
        let _ = writeln!(out, "\nUpdates:");
        for context in updates {
            for change in &context.changes {
                let _ = writeln!(
                    out,
                    "  {}: {} {} → {}",
                    context.name, change.field, change.from, change.to
                );
            }
        }
    }
    if !preview.clashes.is_empty() {
        let _ = writeln!(out, "\nClashes (the first file read wins):");
        for clash in &preview.clashes {
            let _ = writeln!(
                out,
                "  {}: used from {}, ignored in {}",
                clash.context, clash.kept_file, clash.ignored_file
            );
        }
    }
    if !preview.malformed.is_empty() {
        let _ = writeln!(
            out,
            "\nMalformed (skipped; every other file is still read):"
        );
        for problem in &preview.malformed {
            let _ = writeln!(out, "  {}: {}", problem.file, problem.reason);
        }
    }
    let s = &preview.summary;
    let _ = writeln!(
        out,
        "\n{} context(s): {} to insert, {} to update, {} unchanged, {} kept (manual), \
         {} ignored (deleted); {} clash(es); {} malformed.",
        s.contexts,
        s.insert,
        s.update,
        s.unchanged,
        s.kept_manual,
        s.ignored,
        s.clashes,
        s.malformed
    );
    out
}

/// Writes aligned columns; the last one is not padded.
pub fn write_table<const N: usize>(out: &mut String, header: &[String; N], rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in std::iter::once(header).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}
