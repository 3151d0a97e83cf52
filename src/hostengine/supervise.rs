//! The supervisor's loop: decide, wait, start, verify, watch, restart, stop.
//! One task on a current-thread runtime; every wait also listens for
//! SIGTERM/SIGINT (stop the engine, exit) and SIGCHLD (an exit to handle,
//! orphans to reap), so nothing it does can keep it from stopping in time.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::{sleep, sleep_until, Instant, MissedTickBehavior};
use tracing::{debug, error, info, warn};

use super::dcgmi::{self, GpuCheck};
use super::detect;
use super::engine::{self, Bundle};
use super::options::{backoff, HostengineError, Options, KILL_WAIT};
use super::status::{self, EngineInfo, LastExit, OtherEngine, State, Status, StatusFile};
use crate::bundle;
use crate::host::HostRoot;
use crate::plan::{self, Plan, Purpose, Roots};
use crate::policy::Policy;
use crate::probe::{self, driver, CheckReport, ProbeConfig};
use crate::report::error_chain;

/// How long one readiness probe may wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a starting engine is asked whether it accepts connections.
const READY_POLL: Duration = Duration::from_millis(100);
/// How many looks in a row an engine that answered dcgmi before may fail to
/// answer it before it is taken for hung and restarted.
const HUNG_AFTER: u32 = 3;
/// The first pause while waiting for the bundle.
const BUNDLE_WAIT_FIRST: Duration = Duration::from_secs(1);

/// What the signals say.
enum Event {
    Stop(&'static str),
    Child,
}

/// SIGTERM, SIGINT and SIGCHLD as streams.
struct Signals {
    term: Signal,
    int: Signal,
    child: Signal,
}

impl Signals {
    fn new() -> io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            child: signal(SignalKind::child())?,
        })
    }

    async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.term.recv() => Event::Stop("SIGTERM"),
            _ = self.int.recv() => Event::Stop("SIGINT"),
            _ = self.child.recv() => Event::Child,
        }
    }
}

/// A signal, as it concerns a running engine.
enum EngineEvent {
    Stop(&'static str),
    Exited(LastExit),
    Nothing,
}

/// Whether to go on.
enum Flow<T> {
    Go(T),
    Stop(&'static str),
}

/// How a run of our engine ended.
enum Ended {
    /// We were asked to stop, and stopped it.
    Stop(&'static str),
    /// Another engine appeared; ours is stopped.
    OtherEngine,
    /// It exited or had to be stopped: a failure, counted for backoff.
    Failed { exit: LastExit, stable: bool },
}

struct Supervisor<'a> {
    host: &'a HostRoot,
    policy: &'a Policy,
    options: &'a Options,
    address: SocketAddr,
    status: Status,
    file: StatusFile,
    signals: Signals,
    /// The verified bundle, kept while `current` points at it.
    bundle: Option<Bundle>,
    bundle_waits: u32,
    /// Whether the host's `/proc` can be searched for other engines.
    scan_processes: bool,
}

/// The supervisor's whole life (see the module docs of `hostengine`).
pub(super) async fn supervise(
    host: &HostRoot,
    policy: &Policy,
    options: &Options,
) -> Result<(), HostengineError> {
    let signals = Signals::new().map_err(HostengineError::Signals)?;
    let port = policy.hostengine.port;
    let mut sup = Supervisor {
        host,
        policy,
        options,
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        status: Status::new(options.arch, port),
        file: StatusFile::new(host, &options.status),
        signals,
        bundle: None,
        bundle_waits: 0,
        scan_processes: true,
    };
    info!(arch = %options.arch, port, host_root = %host.root().display(), "hostengine supervisor starting");
    let signal = if policy.hostengine.wanted_on(options.arch) {
        sup.adopt_orphans();
        sup.check_proc_dir();
        sup.supervise().await
    } else {
        sup.enter(
            State::IdleNotNeeded,
            format!(
                "the policy wants no engine on {} ([hostengine] run = \"{}\", architectures = {:?}); staying idle",
                options.arch,
                policy.hostengine.run.as_str(),
                policy.hostengine.architectures.iter().map(|a| a.as_str()).collect::<Vec<_>>()
            ),
        );
        sup.idle_forever().await
    };
    sup.engine_gone();
    sup.status.next_restart = None;
    sup.enter(State::Stopped, format!("stopped by {signal}"));
    Ok(())
}

impl Supervisor<'_> {
    /// Records and logs a transition (or a new reason for the same state).
    fn enter(&mut self, state: State, reason: String) {
        let changed = self.status.state != state;
        if changed {
            self.status.since = status::now();
        }
        if changed || self.status.reason != reason {
            let name = state.as_str();
            match state {
                State::CrashLoop => error!(state = name, pid = self.status.pid, "{reason}"),
                State::IdleOtherEngine | State::WaitingForBundle => {
                    warn!(state = name, "{reason}")
                }
                _ => info!(state = name, pid = self.status.pid, "{reason}"),
            }
        }
        self.status.state = state;
        self.status.reason = reason;
        self.file.write(&mut self.status);
    }

    /// The status no longer describes a running engine (`last_exit` does).
    fn engine_gone(&mut self) {
        self.status.pid = None;
        self.status.engine = None;
        self.status.gpus = None;
    }

    /// Become the reaper of what our engines leave behind.
    fn adopt_orphans(&self) {
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            warn!(error = %e, "cannot become a child subreaper; processes orphaned by the engine go to the host's reaper");
        }
    }

    /// Whether the host's `/proc` shows pids comparable with ours.
    fn check_proc_dir(&mut self) {
        let proc_dir = &self.options.proc_dir;
        match detect::shares_our_pid_namespace(proc_dir) {
            Some(true) => debug!(proc = %proc_dir.display(), "the host's processes are visible"),
            Some(false) => {
                warn!(proc = %proc_dir.display(), "this is not our PID namespace's /proc (is the host container superpowered?): our engine cannot be told apart from others there, so other engines are detected by their port only");
                self.scan_processes = false;
            }
            None => {
                warn!(proc = %proc_dir.display(), "no processes visible there (not a procfs); other engines are detected by their port only")
            }
        }
    }

    /// Another engine, by port (unless `ours` holds it) and by process.
    fn other_engine(&self, ours: Option<u32>) -> Option<OtherEngine> {
        let port_listening = ours.is_none() && detect::port_accepts(self.address, CONNECT_TIMEOUT);
        let processes = if self.scan_processes {
            detect::engine_processes(&self.options.proc_dir, ours.as_slice())
        } else {
            Vec::new()
        };
        (port_listening || !processes.is_empty()).then_some(OtherEngine {
            port_listening,
            processes,
        })
    }

    /// Waits `duration`, reaping on SIGCHLD, unless asked to stop.
    async fn pause(&mut self, duration: Duration) -> Flow<()> {
        let deadline = Instant::now() + duration;
        loop {
            tokio::select! {
                _ = sleep_until(deadline) => return Flow::Go(()),
                event = self.signals.next() => match event {
                    Event::Stop(signal) => return Flow::Stop(signal),
                    Event::Child => reap(),
                },
            }
        }
    }

    async fn idle_forever(&mut self) -> &'static str {
        loop {
            if let Flow::Stop(signal) = self.pause(self.options.timings.recheck).await {
                return signal;
            }
        }
    }

    /// Steps 2–5 of the module docs, until asked to stop.
    async fn supervise(&mut self) -> &'static str {
        let timings = self.options.timings;
        let mut failures = 0u32;
        loop {
            if let Some(other) = self.other_engine(None) {
                let reason = format!(
                    "another DCGM host engine serves this node ({}); not starting ours (one engine per node), looking again in {:?}",
                    other.describe(&self.status.address),
                    timings.recheck
                );
                self.status.other_engine = Some(other);
                self.enter(State::IdleOtherEngine, reason);
                match self.pause(timings.recheck).await {
                    Flow::Go(()) => continue,
                    Flow::Stop(signal) => return signal,
                }
            }
            self.status.other_engine = None;
            let bundle = match self.bundle().await {
                Flow::Go(Some(bundle)) => bundle,
                Flow::Go(None) => continue,
                Flow::Stop(signal) => return signal,
            };
            match self.run(&bundle, &mut failures).await {
                Ended::Stop(signal) => return signal,
                Ended::OtherEngine => {}
                Ended::Failed { exit, stable } => {
                    if stable {
                        failures = 0;
                    }
                    failures += 1;
                    self.status.restarts += 1;
                    self.status.consecutive_failures = failures;
                    self.engine_gone();
                    let delay = backoff(timings.restart_delay, timings.backoff_cap, failures);
                    self.status.next_restart = Some(status::after(delay));
                    let what = exit.reason.clone();
                    self.status.last_exit = Some(exit);
                    if failures >= timings.crash_loop_after {
                        self.enter(
                            State::CrashLoop,
                            format!("nv-hostengine failed {failures} times in a row (last: {what}); restarting in {delay:?} (backoff, at most {:?})", timings.backoff_cap),
                        );
                    } else {
                        self.enter(
                            State::Starting,
                            format!("nv-hostengine ended unexpectedly ({what}); restarting in {delay:?}"),
                        );
                    }
                    if let Flow::Stop(signal) = self.pause(delay).await {
                        return signal;
                    }
                    self.status.next_restart = None;
                }
            }
        }
    }

    /// Probes the host like `check` does: NVML's directory, the device nodes,
    /// the driver (for the provisioning plan).
    fn probe(&self) -> CheckReport {
        let mut config = ProbeConfig::new(self.options.arch);
        config.install_dir = self.policy.dcgm.install_dir.clone();
        probe::probe(self.host, &config)
    }

    /// The bundle to run, or `None` after waiting (look again), provisioning
    /// it through `boot`'s plan when the policy allows.
    async fn bundle(&mut self) -> Flow<Option<Bundle>> {
        let install_dir = &self.policy.dcgm.install_dir;
        let current = engine::current_version(self.host, install_dir);
        if let Some(bundle) = &self.bundle {
            if current.as_deref() == Some(bundle.sha256.as_str())
                && self.host.join(&bundle.engine).is_file()
            {
                return Flow::Go(Some(bundle.clone()));
            }
            self.bundle = None;
        }
        let missing = match engine::find_bundle(self.host, install_dir, self.options.arch) {
            Ok(bundle) => {
                info!(bundle = %bundle.dir.display(), dcgmi = bundle.dcgmi.is_some(), "found the installed bundle, verified against its manifest");
                self.bundle_waits = 0;
                self.bundle = Some(bundle.clone());
                return Flow::Go(Some(bundle));
            }
            Err(missing) => missing,
        };
        let check = self.probe();
        let roots = Roots {
            host: self.host,
            image: &self.options.image_root,
        };
        let reason = match plan::provision_plan(
            self.policy,
            self.options.arch,
            roots,
            &check,
            Purpose::HostEngine,
        ) {
            Plan::Provision(request) => {
                self.enter(
                    State::WaitingForBundle,
                    format!(
                        "{missing}; provisioning it myself from {} (sha256 {}), as boot would",
                        request.source, request.sha256
                    ),
                );
                match self.provision(&request).await {
                    Flow::Stop(signal) => return Flow::Stop(signal),
                    // Looked at again at once: a bundle that installs but
                    // has no engine (a libraries-only package) must wait
                    // like any other missing one, not loop.
                    Flow::Go(Ok(())) => {
                        match engine::find_bundle(self.host, install_dir, self.options.arch) {
                            Ok(bundle) => {
                                info!(bundle = %bundle.dir.display(), dcgmi = bundle.dcgmi.is_some(), "provisioned the pinned bundle, verified against its manifest");
                                self.bundle_waits = 0;
                                self.bundle = Some(bundle.clone());
                                return Flow::Go(Some(bundle));
                            }
                            Err(still) => format!("provisioned the pinned bundle, but {still}"),
                        }
                    }
                    Flow::Go(Err(e)) => format!("{missing}; provisioning it failed: {e}"),
                }
            }
            Plan::NotNeeded(reason) | Plan::Impossible(reason) => {
                format!("{missing}; not provisioning it here: {reason}")
            }
        };
        self.bundle_waits += 1;
        let delay = backoff(
            BUNDLE_WAIT_FIRST.min(self.options.timings.bundle_wait_cap),
            self.options.timings.bundle_wait_cap,
            self.bundle_waits,
        );
        self.enter(
            State::WaitingForBundle,
            format!("{reason}; looking again in {delay:?}"),
        );
        match self.pause(delay).await {
            Flow::Go(()) => Flow::Go(None),
            Flow::Stop(signal) => Flow::Stop(signal),
        }
    }

    /// `bundle::provision_async`, interruptible by SIGTERM/SIGINT (dropping
    /// it leaves the previous installation intact).
    async fn provision(&mut self, request: &bundle::ProvisionRequest) -> Flow<Result<(), String>> {
        let work = bundle::provision_async(self.host, request);
        tokio::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => {
                    return Flow::Go(match result {
                        Ok(report) => {
                            info!(install = %report.install_path.display(), cache_hit = report.cache_hit, "bundle provisioned");
                            Ok(())
                        }
                        Err(e) => {
                            let text = error_chain(&e);
                            warn!(error = %text, "provisioning the bundle failed");
                            Err(text)
                        }
                    });
                }
                event = self.signals.next() => match event {
                    Event::Stop(signal) => return Flow::Stop(signal),
                    Event::Child => reap(),
                },
            }
        }
    }

    /// One life of our engine: start, wait until it accepts connections,
    /// check its GPUs, watch it.
    async fn run(&mut self, bundle: &Bundle, failures: &mut u32) -> Ended {
        let timings = self.options.timings;
        let check = self.probe();
        let nvml_dir = check.driver.nvml.as_deref().and_then(Path::parent);
        if nvml_dir.is_none() {
            warn!("libnvidia-ml.so.1 not found in the NVIDIA library directories; the engine is left to DCGM's own search, which does not include /usr/lib/nvidia/tesla");
        }
        let device_nodes = check.driver.devices;
        let launch =
            engine::engine_launch(self.host, bundle, nvml_dir, self.policy.hostengine.port);
        let started = Instant::now();
        let mut child = match engine::spawn(&launch, engine_log(), Stdio::inherit()) {
            Ok(child) => child,
            Err(e) => {
                error!(program = %launch.program.display(), error = %e, "cannot start nv-hostengine");
                return Ended::Failed {
                    exit: LastExit::other(
                        format!("cannot start {}: {e}", launch.program.display()),
                        Duration::ZERO,
                    ),
                    stable: false,
                };
            }
        };
        let pid = child.id();
        self.status.pid = Some(pid);
        self.status.bundle = Some(bundle.dir.clone());
        self.status.gpus = None;
        self.status.engine = Some(EngineInfo {
            pid,
            started: status::now(),
            bundle_sha256: bundle.sha256.clone(),
            argv: launch.argv(),
            ld_library_path: launch.ld_library_path.clone(),
            root: self.host.root().to_path_buf(),
            ready_ms: None,
        });
        self.enter(
            State::Starting,
            format!(
                "started nv-hostengine (pid {pid}); waiting for it to accept connections on {}",
                self.address
            ),
        );

        // Ready = accepting connections, within the ready timeout.
        loop {
            if detect::port_accepts(self.address, CONNECT_TIMEOUT) {
                break;
            }
            if started.elapsed() >= timings.ready_timeout {
                let how = self.stop(&mut child).await;
                error!(pid, timeout = ?timings.ready_timeout, "nv-hostengine does not accept connections; stopped it");
                return Ended::Failed {
                    exit: LastExit::other(
                        format!(
                            "not accepting connections on {} after {:?}; stopped it ({how})",
                            self.address, timings.ready_timeout
                        ),
                        started.elapsed(),
                    ),
                    stable: false,
                };
            }
            tokio::select! {
                _ = sleep(READY_POLL) => {}
                event = self.engine_event(&mut child, started) => match event {
                    EngineEvent::Stop(signal) => {
                        self.stop(&mut child).await;
                        return Ended::Stop(signal);
                    }
                    EngineEvent::Exited(exit) => {
                        warn!(pid, reason = %exit.reason, "nv-hostengine exited before accepting connections");
                        return Ended::Failed { exit, stable: false };
                    }
                    EngineEvent::Nothing => {}
                },
            }
        }
        let ready_at = Instant::now();
        if let Some(engine) = &mut self.status.engine {
            engine.ready_ms =
                Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        }

        // Sees the GPUs?
        let gpus = match self
            .verify(bundle, nvml_dir, device_nodes, &mut child, started)
            .await
        {
            Flow::Go(Ok(gpus)) => gpus,
            Flow::Go(Err(exit)) => {
                return Ended::Failed {
                    exit,
                    stable: false,
                }
            }
            Flow::Stop(signal) => {
                self.stop(&mut child).await;
                return Ended::Stop(signal);
            }
        };
        // Whether dcgmi has had an answer from this engine: only then does
        // its silence say the engine hangs (and not that dcgmi cannot work).
        let mut answered = gpus.answered();
        let mut silent = 0u32;
        self.record_gpus(gpus);
        self.enter(State::Running, self.running_reason(pid));

        // Watch it.
        let mut recheck = tokio::time::interval_at(ready_at + timings.recheck, timings.recheck);
        recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = recheck.tick() => {
                    if let Some(other) = self.other_engine(Some(pid)) {
                        error!(ours = pid, "another nv-hostengine appeared on the host ({}): stopping ours, two engines on one node are never allowed and the cluster-managed one wins", other.describe(&self.status.address));
                        let how = self.stop(&mut child).await;
                        self.engine_gone();
                        let reason = format!(
                            "another DCGM host engine appeared ({}); stopped ours (pid {pid}, {how}); looking again in {:?}",
                            other.describe(&self.status.address),
                            timings.recheck
                        );
                        self.status.other_engine = Some(other);
                        self.enter(State::IdleOtherEngine, reason);
                        if let Flow::Stop(signal) = self.pause(timings.recheck).await {
                            return Ended::Stop(signal);
                        }
                        return Ended::OtherEngine;
                    }
                    if !detect::port_accepts(self.address, CONNECT_TIMEOUT * 4) {
                        let how = self.stop(&mut child).await;
                        error!(pid, "nv-hostengine stopped accepting connections; stopped it to start it again");
                        return Ended::Failed {
                            exit: LastExit::other(format!("stopped accepting connections on {}; stopped it ({how})", self.address), started.elapsed()),
                            stable: ready_at.elapsed() >= timings.stable_after,
                        };
                    }
                    if *failures > 0 && ready_at.elapsed() >= timings.stable_after {
                        info!(pid, "nv-hostengine has stayed up; the failure count starts again");
                        *failures = 0;
                        self.status.consecutive_failures = 0;
                        self.file.write(&mut self.status);
                    }
                    // Asked again at every look: an engine that still
                    // accepts connections may hang inside (FACTS §7.2), and
                    // device nodes may come or go. Counted again, too.
                    let (device_nodes, _) = driver::device_nodes(self.host);
                    match self.verify(bundle, nvml_dir, device_nodes, &mut child, started).await {
                            Flow::Go(Ok(gpus)) => {
                                if gpus.answered() {
                                    answered = true;
                                    silent = 0;
                                } else if answered && matches!(gpus, GpuCheck::Error { .. }) {
                                    silent += 1;
                                    if silent >= HUNG_AFTER {
                                        let error = gpus.describe();
                                        let how = self.stop(&mut child).await;
                                        error!(pid, "nv-hostengine accepts connections but has not answered dcgmi {silent} times in a row; stopped it to start it again");
                                        return Ended::Failed {
                                            exit: LastExit::other(format!("accepted connections but did not answer dcgmi {silent} times in a row (last: {error}); stopped it ({how})"), started.elapsed()),
                                            stable: false,
                                        };
                                    }
                                }
                                self.record_gpus(gpus);
                                self.enter(State::Running, self.running_reason(pid));
                            }
                            Flow::Go(Err(exit)) => return Ended::Failed { exit, stable: ready_at.elapsed() >= timings.stable_after },
                            Flow::Stop(signal) => {
                                self.stop(&mut child).await;
                                return Ended::Stop(signal);
                            }
                    }
                }
                event = self.engine_event(&mut child, started) => match event {
                    EngineEvent::Stop(signal) => {
                        self.stop(&mut child).await;
                        return Ended::Stop(signal);
                    }
                    EngineEvent::Exited(exit) => {
                        error!(pid, reason = %exit.reason, "nv-hostengine exited unexpectedly");
                        return Ended::Failed { exit, stable: ready_at.elapsed() >= timings.stable_after };
                    }
                    EngineEvent::Nothing => {}
                },
            }
        }
    }

    fn running_reason(&self, pid: u32) -> String {
        let gpus = self
            .status
            .gpus
            .as_ref()
            .map_or_else(|| "GPUs not checked".to_owned(), GpuCheck::describe);
        format!(
            "nv-hostengine (pid {pid}) accepts connections on {}; {gpus}",
            self.address
        )
    }

    fn record_gpus(&mut self, gpus: GpuCheck) {
        if self.status.gpus.as_ref() != Some(&gpus) {
            match &gpus {
                GpuCheck::Match { .. } => info!("{}", gpus.describe()),
                GpuCheck::Mismatch { .. } => error!("{}", gpus.describe()),
                GpuCheck::Unverified { .. } | GpuCheck::Error { .. } => {
                    warn!("{}", gpus.describe())
                }
            }
        }
        self.status.gpus = Some(gpus);
    }

    /// `dcgmi discovery -l` against our engine, compared with the device
    /// nodes; interrupted by a stop request or by the engine's exit (then the
    /// exit is returned as the error).
    async fn verify(
        &mut self,
        bundle: &Bundle,
        nvml_dir: Option<&Path>,
        device_nodes: usize,
        child: &mut Child,
        started: Instant,
    ) -> Flow<Result<GpuCheck, LastExit>> {
        let Some(dcgmi) = &bundle.dcgmi else {
            return Flow::Go(Ok(GpuCheck::Unverified {
                device_nodes,
                reason: "the bundle has no dcgmi to ask the engine with".to_owned(),
            }));
        };
        let launch = engine::dcgmi_launch(
            self.host,
            dcgmi,
            &bundle.lib,
            nvml_dir,
            &self.status.address,
        );
        let timeout = self.options.timings.dcgmi_timeout;
        let task = tokio::task::spawn_blocking(move || dcgmi::discover(&launch, timeout));
        tokio::pin!(task);
        loop {
            tokio::select! {
                joined = &mut task => {
                    return Flow::Go(Ok(match joined {
                        Ok(Ok(count)) => GpuCheck::compare(count, device_nodes),
                        Ok(Err(e)) => GpuCheck::Error { device_nodes, error: error_chain(&e) },
                        Err(e) => GpuCheck::Error { device_nodes, error: format!("the dcgmi task failed: {e}") },
                    }));
                }
                event = self.engine_event(child, started) => match event {
                    EngineEvent::Stop(signal) => return Flow::Stop(signal),
                    EngineEvent::Exited(exit) => return Flow::Go(Err(exit)),
                    EngineEvent::Nothing => {}
                },
            }
        }
    }

    /// The next signal as it concerns a running engine: a stop request, the
    /// engine's exit, or nothing for it (orphans are reaped).
    async fn engine_event(&mut self, child: &mut Child, started: Instant) -> EngineEvent {
        match self.signals.next().await {
            Event::Stop(signal) => EngineEvent::Stop(signal),
            Event::Child => match exited(child, started) {
                Some(exit) => EngineEvent::Exited(exit),
                None => {
                    reap();
                    EngineEvent::Nothing
                }
            },
        }
    }

    /// SIGTERM, then SIGKILL after the grace period; says how it ended.
    /// Further stop requests while stopping change nothing.
    async fn stop(&mut self, child: &mut Child) -> String {
        let pid = child.id();
        if let Some(exit) = exited(child, Instant::now()) {
            return exit.reason;
        }
        info!(pid, grace = ?self.options.timings.stop_grace, "stopping nv-hostengine (SIGTERM)");
        send_group(pid, nix::sys::signal::Signal::SIGTERM);
        let grace_end = Instant::now() + self.options.timings.stop_grace;
        let mut killed = false;
        let mut give_up = grace_end + KILL_WAIT;
        loop {
            if let Some(exit) = exited(child, Instant::now()) {
                let how = if killed {
                    format!("{}, after SIGKILL", exit.reason)
                } else {
                    exit.reason
                };
                info!(pid, "nv-hostengine stopped ({how})");
                return how;
            }
            let wake = if killed { give_up } else { grace_end };
            tokio::select! {
                _ = sleep_until(wake) => {
                    if killed {
                        error!(pid, "nv-hostengine did not go away after SIGKILL; leaving it");
                        engine::disown(pid);
                        return "did not exit after SIGKILL".to_owned();
                    }
                    warn!(pid, grace = ?self.options.timings.stop_grace, "nv-hostengine ignored SIGTERM; SIGKILL");
                    send_group(pid, nix::sys::signal::Signal::SIGKILL);
                    killed = true;
                    give_up = Instant::now() + KILL_WAIT;
                }
                event = self.signals.next() => {
                    if let Event::Child = event {
                        reap();
                    }
                }
            }
        }
    }
}

/// Where the engine's own log (`-f -`, its stdout) goes: our stderr, so that
/// both end up in the container's journal and our stdout stays for results.
fn engine_log() -> Stdio {
    io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::inherit())
}

/// The engine's exit, if it has exited (and reaps it).
fn exited(child: &mut Child, started: Instant) -> Option<LastExit> {
    let exit = match child.try_wait() {
        Ok(None) => return None,
        Ok(Some(status)) => LastExit::from_status(status, started.elapsed()),
        Err(e) => LastExit::other(format!("lost track of it: {e}"), started.elapsed()),
    };
    engine::disown(child.id());
    // What the engine started (DCGM's diagnostics fork `nvvs`) is in its
    // process group and would outlive it: gone with it, before a restart.
    if let Err(e) = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    ) {
        if e != nix::errno::Errno::ESRCH {
            debug!(pgid = child.id(), error = %e, "cannot sweep the engine's process group");
        }
    }
    Some(exit)
}

/// Signals the engine's process group (it is its leader): the engine and
/// whatever it started.
fn send_group(pid: u32, signal: nix::sys::signal::Signal) {
    if let Err(e) = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), signal) {
        debug!(pid, signal = %signal, error = %e, "cannot signal nv-hostengine's process group (gone already?)");
    }
}

fn reap() {
    for pid in detect::reap_orphans() {
        debug!(pid, "reaped an orphaned process");
    }
}
