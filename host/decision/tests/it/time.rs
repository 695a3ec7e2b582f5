//! Times in the test tables: seconds, with milliseconds after a point (`69.999`).

use vigil_decision::Timestamp;

/// `t` as a table writes it.
pub fn show_time(t: Timestamp) -> String {
    let ms = t.millis();
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
    }
}

/// A time of a table.
pub fn parse_time(text: &str) -> Result<Timestamp, String> {
    let bad = || format!("bad time `{text}`");
    let (secs, millis) = match text.split_once('.') {
        Some((secs, millis)) if millis.len() == 3 => {
            (secs, millis.parse::<i64>().map_err(|_| bad())?)
        }
        Some(_) => return Err(bad()),
        None => (text, 0),
    };
    let secs: i64 = secs.parse().map_err(|_| bad())?;
    Ok(Timestamp::from_secs(secs).plus_millis(millis))
}
