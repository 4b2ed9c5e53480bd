//! The harness of Switchboard's black-box and conformance suites (`harness = false`).
//!
//! libtest can only ignore a test at compile time, so a test whose tool or service is absent
//! on this machine (PostgreSQL, Redis, Chromium, Node, a Python library) would report `ok`
//! although it ran nothing. Here a test calls [`skip`] with the reason instead: the harness
//! reports it as `ignored` on its own line, lists every skip at the end, and with
//! `SWITCHBOARD_TEST_STRICT=1` (set by `.ci/run`) a skip fails the run.
//!
//! The command line is libtest's for what the suites use: name filters, `--exact`, `--skip`,
//! `--list` (with `--format terse`, as cargo-nextest asks), `--test-threads`, `--nocapture`,
//! `--ignored` / `--include-ignored`, `-q`. Output is not captured: tests print little, and
//! a failing test's panic is printed where it happens and again in the summary.

use std::any::Any;
use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use inventory;

/// One registered test: `name` as libtest would print it (`module::test::backend`).
pub struct Test {
    pub name: &'static str,
    pub run: fn(),
}

inventory::collect!(Test);

/// Registers `$run` (a `fn()`) under the name `<module path without the crate>::$suffix`.
#[macro_export]
macro_rules! register {
    ($suffix:expr, $run:path) => {
        $crate::inventory::submit! {
            $crate::Test { name: concat!(module_path!(), "::", $suffix), run: $run }
        }
    };
}

/// The payload a skipped test unwinds with.
struct Skipped(String);

/// Ends the current test as skipped: the machine lacks what it needs, said in `reason`
/// (what is missing and how to get it). It unwinds without the panic hook: nothing else is
/// printed.
pub fn skip(reason: &str) -> ! {
    std::panic::resume_unwind(Box::new(Skipped(reason.to_owned())))
}

enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

struct Options {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    terse: bool,
    quiet: bool,
    threads: usize,
}

fn options() -> Options {
    let mut o = Options {
        filters: Vec::new(),
        skips: Vec::new(),
        exact: false,
        list: false,
        terse: false,
        quiet: false,
        threads: std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).unwrap_or_default();
        match flag.as_str() {
            "--exact" => o.exact = true,
            "--list" => o.list = true,
            "-q" | "--quiet" => o.quiet = true,
            "--format" => o.terse = value() == "terse",
            "--test-threads" => o.threads = value().parse().unwrap_or(o.threads),
            "--skip" => o.skips.push(value()),
            "--color" | "-Z" | "--logfile" | "--shuffle-seed" => {
                value();
            }
            // Nothing is ignored at compile time, and output is never captured.
            "--ignored" | "--include-ignored" | "--nocapture" | "--show-output" | "--test"
            | "--shuffle" => {}
            f if f.starts_with('-') => {
                eprintln!("unknown option {f} (ignored by the Switchboard test harness)")
            }
            _ => o.filters.push(arg),
        }
    }
    o.threads = o.threads.max(1);
    o
}

fn selected(o: &Options, name: &str) -> bool {
    let matches = |f: &String| {
        if o.exact {
            name == f
        } else {
            name.contains(f.as_str())
        }
    };
    (o.filters.is_empty() || o.filters.iter().any(matches)) && !o.skips.iter().any(matches)
}

fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the test panicked".to_owned())
}

fn run_one(name: &str, test: &Test) -> Outcome {
    let run = test.run;
    let joined = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(run)
        .expect("a thread for the test")
        .join();
    match joined {
        Ok(()) => Outcome::Passed,
        Err(payload) => match payload.downcast::<Skipped>() {
            Ok(skipped) => Outcome::Skipped(skipped.0),
            Err(payload) => Outcome::Failed(message(payload.as_ref())),
        },
    }
}

/// Runs the registered tests the command line selects; exits 101 when one failed (or, with
/// `SWITCHBOARD_TEST_STRICT=1`, was skipped).
pub fn main() {
    let o = options();
    let strip = |name: &'static str| name.split_once("::").map_or(name, |(_, rest)| rest);
    let mut all: Vec<(&'static str, &'static Test)> = inventory::iter::<Test>
        .into_iter()
        .map(|t| (strip(t.name), t))
        .collect();
    all.sort_by_key(|(name, _)| *name);
    let total = all.len();
    let chosen: Vec<_> = all.into_iter().filter(|(n, _)| selected(&o, n)).collect();
    if o.list {
        for (name, _) in &chosen {
            println!("{name}: test");
        }
        if !o.terse {
            println!("\n{} tests, 0 benchmarks", chosen.len());
        }
        return;
    }
    let strict = std::env::var("SWITCHBOARD_TEST_STRICT").is_ok_and(|v| v == "1");
    let n = chosen.len();
    println!("\nrunning {n} test{}", if n == 1 { "" } else { "s" });
    let started = Instant::now();
    let queue = Arc::new(Mutex::new(chosen.into_iter().collect::<VecDeque<_>>()));
    let results = Arc::new(Mutex::new(Vec::new()));
    let quiet = o.quiet;
    let workers: Vec<_> = (0..o.threads)
        .map(|_| {
            let queue = Arc::clone(&queue);
            let results = Arc::clone(&results);
            std::thread::spawn(move || {
                loop {
                    let Some((name, test)) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let outcome = run_one(name, test);
                    let word = match &outcome {
                        Outcome::Passed => "ok".to_owned(),
                        Outcome::Failed(_) => "FAILED".to_owned(),
                        Outcome::Skipped(why) => format!("ignored, SKIPPED: {why}"),
                    };
                    if !quiet || !matches!(outcome, Outcome::Passed) {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "test {name} ... {word}");
                    }
                    results.lock().unwrap().push((name, outcome));
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let mut results = std::mem::take(&mut *results.lock().unwrap());
    results.sort_by_key(|(name, _)| *name);
    let passed = results
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Passed))
        .count();
    let failed: Vec<_> = results
        .iter()
        .filter_map(|(n, o)| match o {
            Outcome::Failed(m) => Some((n, m)),
            _ => None,
        })
        .collect();
    let skipped: Vec<_> = results
        .iter()
        .filter_map(|(n, o)| match o {
            Outcome::Skipped(m) => Some((n, m)),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        println!("\nfailures:");
        // The whole panic message was printed where it happened; here its first line.
        for (name, why) in &failed {
            let first: String = why
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(160)
                .collect();
            println!("    {name}: {first}");
        }
    }
    if !skipped.is_empty() {
        println!(
            "\nskipped ({}), counted as ignored, not as passed:",
            skipped.len()
        );
        for (name, why) in &skipped {
            println!("    SKIPPED: {name}: {why}");
        }
        if strict {
            println!("SWITCHBOARD_TEST_STRICT=1: a skipped test fails the run");
        }
    }
    let ok = failed.is_empty() && (skipped.is_empty() || !strict);
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {} ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if ok { "ok" } else { "FAILED" },
        failed.len(),
        skipped.len(),
        total - results.len(),
        started.elapsed().as_secs_f64()
    );
    if !ok {
        std::process::exit(101);
    }
}
