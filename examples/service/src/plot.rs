//! The README's hand-over plot, from a real run: two instances of this binary on one SQLite
//! file with a 3 s lease. `a` leads; `b` follows; `a` is stopped (SIGTERM: a graceful
//! hand-over, `b` leads within one campaign retry); `a` starts again and follows; `b` is killed
//! (SIGKILL: `a` takes over once `b`'s lease has expired by the store's clock, about lease +
//! retry); `a` is stopped. Each process's `/metrics` is scraped every 100 ms; `lease_held`,
//! `lease_term` and `service_reports_written_total` are drawn into an SVG, with the hand-over
//! times measured from the samples. The run fails when a hand-over takes longer than the
//! timings allow, or a term does not grow at a hand-over.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use plotters::prelude::*;
use rustix::process::{Pid, Signal};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

use crate::service::{LEASE, WRITES};

/// The lease of both instances, in seconds.
const LEASE_SECS: f64 = 3.0;
const SCRAPE_EVERY: Duration = Duration::from_millis(100);

/// One scrape of one process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    held: f64,
    term: f64,
    writes: f64,
}

/// Per instance, one run of samples per process started.
type Samples = Arc<Mutex<BTreeMap<&'static str, Vec<Vec<Sample>>>>>;

struct Running {
    child: Child,
    stop: CancellationToken,
    scraper: JoinHandle<()>,
}

struct Run {
    exe: PathBuf,
    url: String,
    dir: PathBuf,
    t0: Instant,
    samples: Samples,
    events: Vec<(f64, String)>,
}

/// Runs the hand-over and writes the plot to `out`.
pub(crate) async fn run(out: PathBuf) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("lease-handover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut run = Run {
        exe: std::env::current_exe().context("finding this binary")?,
        url: format!("sqlite://{}", dir.join("leases.db").display()),
        dir: dir.clone(),
        t0: Instant::now(),
        samples: Samples::default(),
        events: Vec::new(),
    };
    let t0 = run.t0;
    let at = move |s: f64| t0 + Duration::from_secs_f64(s);

    let a = run.start("a").await?;
    sleep_until(at(1.0)).await;
    let b = run.start("b").await?;
    sleep_until(at(5.0)).await;
    let graceful = run.elapsed();
    run.stop(a, "a", Signal::TERM, "a: SIGTERM").await?;
    sleep_until(at(7.0)).await;
    let a = run.start("a").await?;
    sleep_until(at(11.0)).await;
    let crash = run.elapsed();
    run.stop(b, "b", Signal::KILL, "b: SIGKILL").await?;
    sleep_until(at(17.0)).await;
    run.stop(a, "a", Signal::TERM, "a: SIGTERM").await?;
    let end = run.elapsed();

    let samples = run
        .samples
        .lock()
        .map_err(|_| anyhow!("a scraper panicked"))?
        .clone();
    let taken_by_b = first_held(&samples, "b", graceful)
        .ok_or_else(|| anyhow!("b never led after a's SIGTERM"))?;
    let taken_by_a =
        first_held(&samples, "a", crash).ok_or_else(|| anyhow!("a never led after b's SIGKILL"))?;
    let terms = leading_terms(&samples);
    println!(
        "graceful stop: b leads {:.1} s after a's SIGTERM; crash: a leads {:.1} s after b's \
         SIGKILL (lease {LEASE_SECS} s); terms in order of leading: {terms:?}",
        taken_by_b - graceful,
        taken_by_a - crash
    );
    if taken_by_b - graceful > 1.5 {
        bail!("the graceful hand-over took {:.1} s", taken_by_b - graceful);
    }
    if taken_by_a - crash > LEASE_SECS + 2.0 {
        bail!(
            "the take-over after the crash took {:.1} s",
            taken_by_a - crash
        );
    }
    if terms.windows(2).any(|w| w[1] <= w[0]) || terms.len() < 3 {
        bail!("the terms did not grow at every hand-over: {terms:?}");
    }
    let caption = format!(
        "SIGTERM: b leads after {:.1} s · SIGKILL: a leads after {:.1} s (lease {LEASE_SECS} s)",
        taken_by_b - graceful,
        taken_by_a - crash
    );
    draw(&out, &samples, &run.events, end, &caption)?;
    println!(
        "wrote {} (the instances' logs are in {})",
        out.display(),
        dir.display()
    );
    Ok(())
}

impl Run {
    fn elapsed(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Starts an instance, waits for its address, and scrapes it until it is stopped.
    async fn start(&mut self, who: &'static str) -> Result<Running> {
        let index = {
            let mut samples = self
                .samples
                .lock()
                .map_err(|_| anyhow!("a scraper panicked"))?;
            let runs = samples.entry(who).or_default();
            runs.push(Vec::new());
            runs.len() - 1
        };
        let log = self.dir.join(format!("{who}-{index}.log"));
        let log =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(&self.exe)
            .args([
                "--store",
                &self.url,
                "--listen",
                "127.0.0.1:0",
                "--instance",
                who,
            ])
            .args([
                "--lease",
                &LEASE_SECS.to_string(),
                "--every-ms",
                "200",
                "--linger-ms",
                "400",
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .context("starting an instance")?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from {who}"))?;
        let mut lines = BufReader::new(stdout).lines();
        let addr = timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    return Ok(addr.to_owned());
                }
            }
            Err(anyhow!("{who} exited before it listened"))
        })
        .await
        .map_err(|_| anyhow!("{who} did not listen within 30 s"))??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.events.push((self.elapsed(), format!("{who} starts")));
        let stop = CancellationToken::new();
        let scraper = tokio::spawn(scrape(
            addr,
            who,
            index,
            self.t0,
            Arc::clone(&self.samples),
            stop.clone(),
        ));
        Ok(Running {
            child,
            stop,
            scraper,
        })
    }

    /// Sends `signal` and waits for the process to end (cleanly, after SIGTERM).
    async fn stop(&mut self, mut r: Running, who: &str, signal: Signal, event: &str) -> Result<()> {
        self.events.push((self.elapsed(), event.to_owned()));
        let pid = r
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| anyhow!("{who} has already exited"))?;
        rustix::process::kill_process(pid, signal).with_context(|| format!("signalling {who}"))?;
        let status = timeout(Duration::from_secs(15), r.child.wait())
            .await
            .map_err(|_| anyhow!("{who} did not exit within 15 s of {event}"))??;
        r.stop.cancel();
        let _ = r.scraper.await;
        if signal == Signal::TERM && !status.success() {
            bail!("{who} exited with {status} after SIGTERM");
        }
        Ok(())
    }
}

/// Scrapes `addr`'s `/metrics` every [`SCRAPE_EVERY`] into run `index` of `who`.
async fn scrape(
    addr: String,
    who: &'static str,
    index: usize,
    t0: Instant,
    samples: Samples,
    stop: CancellationToken,
) {
    let mut next = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(next) => {}
        }
        next += SCRAPE_EVERY;
        let Ok(Ok(body)) = timeout(Duration::from_millis(500), get(&addr, "/metrics")).await else {
            continue;
        };
        let t = t0.elapsed().as_secs_f64();
        let held = value(&body, &format!("lease_held{{name=\"{LEASE}\"}}"));
        let term = value(&body, &format!("lease_term{{name=\"{LEASE}\"}}"));
        let writes = value(&body, WRITES).unwrap_or(0.0);
        if let (Some(held), Some(term)) = (held, term)
            && let Ok(mut s) = samples.lock()
            && let Some(run) = s.get_mut(who).and_then(|runs| runs.get_mut(index))
        {
            run.push(Sample {
                t,
                held,
                term,
                writes,
            });
        }
    }
}

/// A plain HTTP/1.0 GET: the body.
async fn get(addr: &str, path: &str) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let (_, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("no HTTP body from {addr}"))?;
    Ok(body.to_owned())
}

/// The value of `series` (a name with its labels, as Prometheus prints it) in a scrape.
/// One panel of the plot: its title, the top of its y axis, the value it draws, and whether
/// it is drawn as steps.
type PanelSpec = (&'static str, f64, fn(&Sample) -> f64, bool);

fn value(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The first time after `after` at which a process of `who` said it held the lease.
fn first_held(
    samples: &BTreeMap<&'static str, Vec<Vec<Sample>>>,
    who: &str,
    after: f64,
) -> Option<f64> {
    samples
        .get(who)?
        .iter()
        .flatten()
        .filter(|s| s.t > after && s.held >= 1.0)
        .map(|s| s.t)
        .reduce(f64::min)
}

/// The terms held, in the order they were first seen held.
fn leading_terms(samples: &BTreeMap<&'static str, Vec<Vec<Sample>>>) -> Vec<u64> {
    let mut seen: Vec<(f64, u64)> = Vec::new();
    for s in samples.values().flatten().flatten() {
        // Tokens are small integers, exported as floats.
        let term = s.term as u64;
        if s.held >= 1.0 && !seen.iter().any(|(_, t)| *t == term) {
            seen.push((s.t, term));
        }
    }
    seen.sort_by(|x, y| x.0.total_cmp(&y.0));
    seen.into_iter().map(|(_, t)| t).collect()
}

fn color(who: &str) -> RGBColor {
    if who == "a" {
        RGBColor(31, 119, 180)
    } else {
        RGBColor(230, 110, 20)
    }
}

/// Draws the three panels: held, term, writes.
fn draw(
    out: &Path,
    samples: &BTreeMap<&'static str, Vec<Vec<Sample>>>,
    events: &[(f64, String)],
    end: f64,
    caption: &str,
) -> Result<()> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let root = SVGBackend::new(out, (1000, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("drawing: {e:?}"))?;
    let (title, rest) = root.split_vertically(40);
    title
        .titled(caption, ("sans-serif", 18))
        .map_err(|e| anyhow!("drawing: {e:?}"))?;
    let panels = rest.split_evenly((3, 1));
    let max_term = samples
        .values()
        .flatten()
        .flatten()
        .map(|s| s.term)
        .fold(1.0, f64::max);
    let max_writes = samples
        .values()
        .flatten()
        .flatten()
        .map(|s| s.writes)
        .fold(1.0, f64::max);
    let specs: [PanelSpec; 3] = [
        (
            "lease_held{name=\"report\"} (x: seconds since the start)",
            1.2,
            |s| s.held,
            true,
        ),
        (
            "lease_term{name=\"report\"}",
            max_term + 1.0,
            |s| s.term,
            true,
        ),
        (
            "service_reports_written_total (per process)",
            max_writes * 1.15,
            |s| s.writes,
            false,
        ),
    ];
    for (area, (name, top, pick, step)) in panels.iter().zip(specs) {
        panel(area, name, top, pick, step, samples, events, end)
            .map_err(|e| anyhow!("drawing {name}: {e}"))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e:?}", out.display()))?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    name: &str,
    top: f64,
    pick: fn(&Sample) -> f64,
    step: bool,
    samples: &BTreeMap<&'static str, Vec<Vec<Sample>>>,
    events: &[(f64, String)],
    end: f64,
) -> Result<(), String> {
    let mut chart = ChartBuilder::on(area)
        .caption(name, ("sans-serif", 15))
        .margin(6)
        .margin_right(20)
        .x_label_area_size(26)
        .y_label_area_size(50)
        // Room on the right for the legend, after the run's end.
        .build_cartesian_2d(0f64..end + 2.5, 0f64..top)
        .map_err(|e| format!("{e:?}"))?;
    chart
        .configure_mesh()
        .max_light_lines(0)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    for (t, what) in events {
        chart
            .draw_series(LineSeries::new(
                vec![(*t, 0.0), (*t, top)],
                RGBColor(150, 150, 150).stroke_width(1),
            ))
            .map_err(|e| format!("{e:?}"))?;
        chart
            .draw_series(std::iter::once(Text::new(
                what.clone(),
                (*t + end * 0.004, top * 0.97),
                ("sans-serif", 11),
            )))
            .map_err(|e| format!("{e:?}"))?;
    }
    for (who, runs) in samples {
        let style = color(who).stroke_width(2);
        for (i, run) in runs.iter().enumerate() {
            let mut points: Vec<(f64, f64)> = Vec::with_capacity(run.len() * 2);
            for s in run {
                if step && let Some(&(_, before)) = points.last() {
                    points.push((s.t, before));
                }
                points.push((s.t, pick(s)));
            }
            let series = chart
                .draw_series(LineSeries::new(points, style))
                .map_err(|e| format!("{e:?}"))?;
            if i == 0 {
                let legend = color(who);
                series
                    .label(format!("instance {who}"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], legend.stroke_width(2))
                    });
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    Ok(())
}
