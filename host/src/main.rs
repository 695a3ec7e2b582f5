//! The `vigil` binary: parses the command line and runs the engine.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use vigil::cli::{Cli, Command, LogFormat};
use vigil::serve::{ServeError, serve_with_plugins};
use vigil::worker::error_chain;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = match args.engine_config(std::env::home_dir()) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("error: {error}");
                    return ExitCode::from(2);
                }
            };
            init_logging(config.log_format);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("error: cannot start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            let result = runtime.block_on(serve_with_plugins(&config, shutdown_signal()));
            match result {
                Ok(_) => ExitCode::SUCCESS,
                Err(error @ ServeError::Locked(_)) => {
                    tracing::error!("{}", error_chain(&error));
                    eprintln!("error: {}", error_chain(&error));
                    ExitCode::from(3)
                }
                Err(error) => {
                    tracing::error!("{}", error_chain(&error));
                    eprintln!("error: {}", error_chain(&error));
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutdown requested");
}
