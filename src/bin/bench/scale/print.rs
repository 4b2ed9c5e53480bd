//! The scale results as one table per backend.

use super::*;

fn rate(r: &Rate) -> String {
    match r.per_sec < 10.0 {
        true => format!("{:.2}/s", r.per_sec),
        false => format!("{:.0}/s", r.per_sec),
    }
}

fn lat(r: &Rate) -> String {
    r.latency
        .as_ref()
        .map(|l| format!("{:.2}/{:.2} ms", l.p50_ms, l.p99_ms))
        .unwrap_or_else(|| "n/a".into())
}

fn mb(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.0} MiB"))
}

/// One table for every backend measured.
pub fn print(runs: &[(&str, ScaleResults)]) {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: String, f: &dyn Fn(&ScaleResults) -> Option<String>| {
        let cells: Vec<String> = runs
            .iter()
            .map(|(_, r)| f(r).unwrap_or_else(|| "n/a".into()))
            .collect();
        rows.push((label, cells));
    };
    let counts: Vec<i64> = runs
        .first()
        .map(|(_, r)| r.pending.iter().map(|p| p.pending).collect())
        .unwrap_or_default();
    for (i, n) in counts.iter().enumerate() {
        fn at(r: &ScaleResults, i: usize) -> Option<&PendingResults> {
            r.pending.get(i)
        }
        let same = runs
            .first()
            .and_then(|(_, r)| at(r, i))
            .is_some_and(|p| p.same_due);
        let label = match same {
            true => format!("{n} pending (one due_at): deliveries/s"),
            false => format!("{n} pending: deliveries/s"),
        };
        row(label, &|r| {
            at(r, i).map(|p| format!("{:.0}/s", p.deliveries_per_sec))
        });
        row("  window".into(), &|r| {
            at(r, i).map(|p| format!("{} in {:.1} s", p.window_deliveries, p.window_s))
        });
        row("  seeding, database".into(), &|r| {
            at(r, i).map(|p| format!("{:.1} s, {}", p.seed_s, mb(p.database_mb)))
        });
        row("  start-up".into(), &|r| {
            at(r, i).map(|p| format!("{:.0} ms", p.startup_ms))
        });
        row("  claim query alone / 7 of 8 busy".into(), &|r| {
            at(r, i).map(|p| {
                format!(
                    "{:.2} / {:.2} ms",
                    p.claim.ms_median, p.claim_saturated.ms_median
                )
            })
        });
    }
    if counts.len() > 1 {
        row(
            format!("deliveries/s {} vs {}", counts[counts.len() - 1], counts[0]),
            &|r| r.pending_ratio.map(|x| format!("{:.2}", x)),
        );
    }
    let history = runs
        .first()
        .and_then(|(_, r)| r.history.as_ref())
        .map(|h| h.messages);
    if let Some(n) = history {
        row(format!("history of {n} messages: seeding"), &|r| {
            r.history.as_ref().map(|h| format!("{:.1} s", h.seed_s))
        });
        row("  database size".into(), &|r| {
            r.history.as_ref().map(|h| mb(h.database_mb))
        });
        row("  start-up".into(), &|r| {
            r.history
                .as_ref()
                .map(|h| format!("{:.0} ms", h.startup_ms))
        });
        row("GET /messages?limit=50".into(), &|r| {
            r.history.as_ref().map(|h| rate(&h.first_page))
        });
        row("  p50/p99".into(), &|r| {
            r.history.as_ref().map(|h| lat(&h.first_page))
        });
        row(format!("{CURSOR_DEPTH} pages by next_cursor"), &|r| {
            r.history.as_ref().map(|h| rate(&h.cursor_pages))
        });
        row("  p50/p99 (pages 2+)".into(), &|r| {
            r.history.as_ref().map(|h| lat(&h.cursor_pages))
        });
        row(
            format!("page after a random cursor, {DEEP_CONNECTIONS} clients"),
            &|r| r.history.as_ref().map(|h| rate(&h.deep_pages)),
        );
        row("  p50/p99".into(), &|r| {
            r.history.as_ref().map(|h| lat(&h.deep_pages))
        });
        row("page query alone: first / half-way".into(), &|r| {
            r.history.as_ref().map(|h| {
                format!(
                    "{:.2} / {:.2} ms",
                    h.page_query_first.ms_median, h.page_query_deep.ms_median
                )
            })
        });
        row("  peak RSS".into(), &|r| {
            r.history.as_ref().map(|h| mb(h.peak_rss_mb))
        });
    }
    print!("{:<38}", "scale");
    for (name, _) in runs {
        print!(" {name:>24}");
    }
    println!();
    for (label, cells) in rows {
        print!("{label:<38}");
        for c in cells {
            print!(" {c:>24}");
        }
        println!();
    }
}
