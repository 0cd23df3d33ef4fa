//! Ctrl-C and SIGTERM for the long-running commands: the first ends a run early but whole, the
//! second exits at once with 130, deleting the temporary databases first.

/// Makes Ctrl-C and SIGTERM end the run early but whole (see the module doc); a second one
/// ends the process at once.
pub fn stop_on_signals() {
    let installed = ctrlc::set_handler(|| {
        if cairn_stress::request_stop() {
            eprintln!("cairn: interrupted again; exiting without the final verification");
            cairn_stress::remove_temporary_dirs();
            std::process::exit(130);
        }
        eprintln!(
            "cairn: interrupted; stopping the workers, then the final verification and the \
             report (interrupt again to exit at once)"
        );
    });
    if let Err(e) = installed {
        tracing::warn!(error = %e, "Ctrl-C will end the run without its verification");
    }
}
