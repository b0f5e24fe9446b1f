//! Tables as the command line prints them: one line per row, columns padded to their widest cell.

/// The header, then one line per row; the last column is not padded. Every cell must be one line
/// (see [`one_line`]).
pub fn render<const N: usize>(
    header: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let rows: Vec<[String; N]> = std::iter::once(header.map(str::to_owned))
        .chain(rows)
        .collect();
    let mut widths = [0; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in &rows {
        let Some((last, padded)) = row.split_last() else {
            continue;
        };
        for (cell, width) in padded.iter().zip(widths) {
            text.push_str(&format!("{cell:<width$}  "));
        }
        text.push_str(last);
        text.push('\n');
    }
    text
}

/// Text that may span lines (a compile error, a stored message), as one line.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
