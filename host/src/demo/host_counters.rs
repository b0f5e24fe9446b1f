//! The host's own account of what it did, read from its admin endpoint's `/metrics` the way an
//! operator's Prometheus would, so the summary reports the host's counters rather than re-counting
//! the table.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the counters may trail the table: each moves just after its row's mark commits.
const CATCH_UP: Duration = Duration::from_secs(2);

/// Totals over every destination type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCounters {
    pub published: u64,
    /// Attempts that failed and were scheduled again.
    pub retried: u64,
    pub dead_lettered: u64,
}

impl HostCounters {
    /// The counters once they account for `settled` rows, or as they are after [`CATCH_UP`].
    pub async fn read_when_caught_up(admin: SocketAddr, settled: u64) -> io::Result<HostCounters> {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let counters = HostCounters::parse(&scrape(admin).await?);
            if counters.published + counters.dead_lettered >= settled || Instant::now() >= deadline {
                return Ok(counters);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn parse(exposition: &str) -> HostCounters {
        HostCounters {
            published: total(exposition, "outbox_published_total"),
            retried: total(exposition, "outbox_retried_total"),
            dead_lettered: total(exposition, "outbox_dead_lettered_total"),
        }
    }
}

/// The sum of every series of the counter `name` in a Prometheus text exposition.
fn total(exposition: &str, name: &str) -> u64 {
    let sum: f64 = exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let metric = series.split('{').next()?.trim();
            (metric == name).then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum();
    sum as u64
}

/// `GET /metrics` over HTTP/1.0, which the server answers with one plain body and then closes.
async fn scrape(admin: SocketAddr) -> io::Result<String> {
    let mut stream = TcpStream::connect(admin).await?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8(response).map_err(|_| io::Error::other("/metrics is not UTF-8 text"))?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| io::Error::other("/metrics answered no body"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split(' ').nth(1) != Some("200") {
        return Err(io::Error::other(format!("/metrics answered {status:?}")));
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_every_destination_type_and_ignore_other_metrics() {
        let exposition = "\
# HELP outbox_published_total Rows marked published
# TYPE outbox_published_total counter
outbox_published_total{destination_type=\"NOOP\"} 7
outbox_published_total{destination_type=\"WEBHOOK\"} 1200
outbox_published_totals 99
outbox_retried_total{destination_type=\"WEBHOOK\"} 3
outbox_claimed_total{destination_type=\"WEBHOOK\"} 1300
";
        let counters = HostCounters::parse(exposition);
        assert_eq!(counters, HostCounters { published: 1207, retried: 3, dead_lettered: 0 });
    }
}
