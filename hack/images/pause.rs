// The pod sandbox's "pause" process: PID 1 of every pod, it holds the pod's namespaces
// open and does nothing else. Only std is used (no crates) so hack/build-images.sh can
// build it with plain rustc, statically:
//   rustc --edition 2021 -O -C target-feature=+crt-static -C panic=abort -o pause pause.rs
use std::os::raw::c_int;

// std already links libc; we only declare the few functions we need.
unsafe extern "C" {
    // glibc's signal() has BSD semantics: the handler stays installed and interrupted
    // system calls restart, which is all we need (no sigaction struct layout to mirror).
    fn signal(signum: c_int, handler: extern "C" fn(c_int)) -> usize;
    fn pause() -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    // _exit, not exit: it is async-signal-safe and there is nothing to flush.
    fn _exit(status: c_int) -> !;
}

// Linux numbers, identical on x86_64 and arm64.
const SIGINT: c_int = 2;
const SIGTERM: c_int = 15;
const SIGCHLD: c_int = 17;
const WNOHANG: c_int = 1;
const SIG_ERR: usize = usize::MAX;

extern "C" fn on_term(_sig: c_int) {
    // The runtime stops the sandbox with SIGTERM; exiting 0 makes it a clean stop.
    unsafe { _exit(0) }
}

extern "C" fn on_child(_sig: c_int) {
    // As PID 1 we inherit orphans of the pod (shared PID namespace): reap all that have
    // exited. Several exits may collapse into one SIGCHLD, hence the loop.
    unsafe { while waitpid(-1, std::ptr::null_mut(), WNOHANG) > 0 {} }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!("pause (k8s-rs) 3.10");
        return;
    }
    // The kernel drops signals a PID 1 has no handler for, so SIGTERM/SIGINT would be
    // ignored without these explicit handlers.
    unsafe {
        let handlers: [(c_int, extern "C" fn(c_int)); 3] =
            [(SIGINT, on_term), (SIGTERM, on_term), (SIGCHLD, on_child)];
        for (sig, handler) in handlers {
            if signal(sig, handler) == SIG_ERR {
                eprintln!("pause: cannot install handler for signal {sig}");
                std::process::exit(1);
            }
        }
        loop {
            pause(); // returns after each handled signal; just wait again
        }
    }
}
