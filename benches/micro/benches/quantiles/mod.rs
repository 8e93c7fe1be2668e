//! The quantiles a hand-over benchmark prints: a mean hides the tail a waiter lives through.

use std::time::Duration;

/// Prints `what`'s p50, p99 and worst over `times` (sorted here); nothing when empty.
pub fn print(what: &str, mut times: Vec<Duration>) {
    if times.is_empty() {
        return;
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
    println!(
        "{what}, {} hand-overs: p50 {:?}, p99 {:?}, worst {:?}",
        times.len(),
        at(0.50),
        at(0.99),
        at(1.0)
    );
}
