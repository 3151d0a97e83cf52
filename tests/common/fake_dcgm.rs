//! Stand-ins for NVIDIA's `nv-hostengine` and `dcgmi`, compiled statically
//! from the C below, so that they run chrooted into a fixture host tree.
//!
//! What they show: the command line and environment the supervisor gives
//! the engine, that something listens where it should, exits, crashes, late
//! binds and GPU counts as the supervisor sees them. What they cannot show:
//! anything about a real engine on a real GPU (NVML, the driver, DCGM's own
//! start-up time, what a real engine does on SIGTERM beyond exiting).
//!
//! The fake engine (`nv-hostengine -n -f - -b IP -p PORT`):
//! - appends one line per start to `/var/log/fake-nv-hostengine.log` (in its
//!   root): `pid=<pid>\tms=<epoch ms>\tld=<LD_LIBRARY_PATH>\targv=<args joined by \x1f>`;
//! - reads `/etc/fake-nv-hostengine.conf`, one word per line: `crash` (exit 3
//!   at once), `bind-late <seconds>`, `gpus <n>` (default: the number of
//!   `/dev/nvidia[0-9]+` entries it sees), `ignore-term`, `hang-after <n>`
//!   (answers n connections, then accepts no more: a hung engine whose port
//!   still takes connections in the kernel's backlog);
//! - listens on IP:PORT; every connection gets `gpus=<n>\n`;
//! - exits 0 on SIGTERM (unless told to ignore it), logging `term pid=<pid>`.
//!
//! The fake dcgmi (`dcgmi discovery -l --host IP:PORT`) connects to the
//! engine, reads its `gpus=<n>` and prints the listing in the format of
//! NVIDIA/DCGM `dcgmi/Query.cpp` (`N GPUs found.`, the GPU table,
//! `0 NvSwitches found.`), or dcgmi's connection error and exit status 255.

use super::elf;

pub const ENGINE_LOG: &str = "/var/log/fake-nv-hostengine.log";
pub const ENGINE_CONF: &str = "/etc/fake-nv-hostengine.conf";

const ENGINE_C: &str = r#"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static int count_gpus(void) {
    DIR *dir = opendir("/dev");
    struct dirent *e;
    int n = 0;
    if (!dir) return 0;
    while ((e = readdir(dir))) {
        const char *p = e->d_name;
        if (strncmp(p, "nvidia", 6) != 0 || !p[6]) continue;
        for (p += 6; *p >= '0' && *p <= '9'; p++) {}
        if (!*p) n++;
    }
    closedir(dir);
    return n;
}

int main(int argc, char **argv) {
    int crash = 0, late = 0, gpus = -1, ignore_term = 0, hang_after = -1, answered = 0, port = 5555, i;
    const char *ip = "127.0.0.1";
    char word[64];
    int value;
    struct timeval tv;
    FILE *conf = fopen("/etc/fake-nv-hostengine.conf", "r");
    FILE *log = fopen("/var/log/fake-nv-hostengine.log", "a");
    if (conf) {
        while (fscanf(conf, "%63s", word) == 1) {
            if (!strcmp(word, "crash")) crash = 1;
            else if (!strcmp(word, "ignore-term")) ignore_term = 1;
            else if (!strcmp(word, "bind-late") && fscanf(conf, "%d", &value) == 1) late = value;
            else if (!strcmp(word, "gpus") && fscanf(conf, "%d", &value) == 1) gpus = value;
            else if (!strcmp(word, "hang-after") && fscanf(conf, "%d", &value) == 1) hang_after = value;
        }
        fclose(conf);
    }
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc) ip = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) port = atoi(argv[++i]);
    }
    gettimeofday(&tv, 0);
    if (log) {
        const char *ld = getenv("LD_LIBRARY_PATH");
        fprintf(log, "pid=%d\tms=%lld\tld=%s\targv=", (int)getpid(),
                (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000, ld ? ld : "(unset)");
        for (i = 0; i < argc; i++) fprintf(log, "%s%s", i ? "\x1f" : "", argv[i]);
        fprintf(log, "\n");
        fflush(log);
    }
    if (crash) return 3;
    if (gpus < 0) gpus = count_gpus();
    if (ignore_term) signal(SIGTERM, SIG_IGN);
    else {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, 0);
    }
    if (late) sleep(late);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, ip, &addr.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 16)) {
        if (log) { fprintf(log, "bind-failed pid=%d errno=%d\n", (int)getpid(), errno); fflush(log); }
        return 1;
    }
    while (!stop) {
        if (hang_after >= 0 && answered >= hang_after) {
            pause();
            continue;
        }
        int c = accept(fd, 0, 0);
        if (c < 0) continue;
        answered++;
        char line[32];
        int n = snprintf(line, sizeof line, "gpus=%d\n", gpus);
        if (write(c, line, n) < 0) {}
        close(c);
    }
    if (log) { fprintf(log, "term pid=%d\n", (int)getpid()); fflush(log); }
    return 0;
}
"#;

const DCGMI_C: &str = r#"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *host) {
    printf("Error: unable to establish a connection to the specified host: %s\n", host);
    printf("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n");
    return 255;
}

int main(int argc, char **argv) {
    const char *host = "localhost";
    char ip[64] = "127.0.0.1", buf[64] = {0};
    int port = 5555, i, gpus = -1;
    FILE *log = fopen("/var/log/fake-dcgmi.log", "a");
    if (log) {
        const char *ld = getenv("LD_LIBRARY_PATH");
        fprintf(log, "ld=%s\targv=", ld ? ld : "(unset)");
        for (i = 0; i < argc; i++) fprintf(log, "%s%s", i ? "\x1f" : "", argv[i]);
        fprintf(log, "\n");
        fclose(log);
    }
    for (i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--host") && i + 1 < argc) host = argv[++i];
    if (argc < 3 || strcmp(argv[1], "discovery") || strcmp(argv[2], "-l")) {
        fprintf(stderr, "fake dcgmi: only 'discovery -l' is implemented\n");
        return 2;
    }
    const char *colon = strrchr(host, ':');
    if (colon) {
        size_t n = (size_t)(colon - host) < sizeof ip - 1 ? (size_t)(colon - host) : sizeof ip - 1;
        memcpy(ip, host, n);
        ip[n] = 0;
        port = atoi(colon + 1);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1 || connect(fd, (struct sockaddr *)&addr, sizeof addr))
        return fail(host);
    if (read(fd, buf, sizeof buf - 1) <= 0 || sscanf(buf, "gpus=%d", &gpus) != 1) return fail(host);
    printf("%d GPU%s found.\n", gpus, gpus == 1 ? "" : "s");
    printf("+--------+----------------------------------------------------------------------+\n");
    printf("| GPU ID | Device Information                                                   |\n");
    printf("+--------+----------------------------------------------------------------------+\n");
    for (i = 0; i < gpus; i++) {
        printf("| %-6d | Name: NVIDIA T4G                                                     |\n", i);
        printf("|        | PCI Bus ID: 00000000:00:%02X.0                                         |\n", 0x1f - i);
        printf("|        | Device UUID: GPU-5a4f3a1e-8a7b-2c1d-9e0f-1234567890%02x                |\n", i);
        printf("+--------+----------------------------------------------------------------------+\n");
    }
    printf("0 NvSwitches found.\n+-----------+\n| Switch ID |\n+-----------+\n+-----------+\n");
    return 0;
}
"#;

/// The fake `nv-hostengine`, or why it cannot be built here.
pub fn engine() -> Result<Vec<u8>, String> {
    elf::static_program("fake-nv-hostengine", ENGINE_C)
}

/// The fake `dcgmi`, or why it cannot be built here.
pub fn dcgmi() -> Result<Vec<u8>, String> {
    elf::static_program("fake-dcgmi", DCGMI_C)
}

/// One start of the fake engine, from its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub pid: u32,
    pub ms: u64,
    pub ld_library_path: String,
    pub argv: Vec<String>,
}

/// The starts recorded in a fake engine's log text.
pub fn starts(log: &str) -> Vec<Start> {
    log.lines()
        .filter_map(|line| {
            let mut pid = None;
            let mut ms = None;
            let mut ld = None;
            let mut argv = None;
            for field in line.split('\t') {
                match field.split_once('=')? {
                    ("pid", v) => pid = v.parse().ok(),
                    ("ms", v) => ms = v.parse().ok(),
                    ("ld", v) => ld = Some(v.to_owned()),
                    ("argv", v) => argv = Some(v.split('\x1f').map(str::to_owned).collect()),
                    _ => {}
                }
            }
            Some(Start {
                pid: pid?,
                ms: ms?,
                ld_library_path: ld?,
                argv: argv?,
            })
        })
        .collect()
}
