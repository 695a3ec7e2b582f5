//! The `vigil` binary: parses the command line and runs the engine.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use vigil::cli::{Cli, Command, DiscoverArgs, LogFormat, OutputFormat};
use vigil::discovery::Sources;
use vigil::discovery_preview::preview;
use vigil::serve::{ServeError, serve_with_plugins};
use vigil::worker::{error_chain, wall_clock};

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
        Command::Discover(args) => discover(&args),
    }
}

/// `vigil discover --dry-run`: prints what discovery finds and what `vigil serve`
/// would write, writing nothing.
fn discover(args: &DiscoverArgs) -> ExitCode {
    if !args.dry_run {
        // The engine discovers by itself (at start-up and on every kubeconfig
        // change); a second writer of discovered clusters beside it would only race
        // it, so this command exists to preview.
        eprintln!(
            "error: `vigil discover` only previews: add --dry-run. `vigil serve` discovers by \
             itself, at start-up and whenever a kubeconfig changes."
        );
        return ExitCode::from(2);
    }
    let database_path = match args.sources.database_path() {
        Ok(path) => path,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let sources = if args.files.is_empty() {
        Sources::from_settings(&args.sources.discovery_settings(std::env::home_dir()))
    } else {
        Sources::new(args.files.iter().cloned(), None)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let planned = runtime.block_on(preview(
        &sources,
        &args.sources.database_url,
        database_path.as_deref(),
        wall_clock(),
    ));
    match planned {
        Ok(preview) => {
            let text = match args.output {
                OutputFormat::Table => preview.to_table(),
                OutputFormat::Json => preview.to_json() + "\n",
            };
            // A closed pipe (`| head`) is not an error of the preview.
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {}", error_chain(&error));
            ExitCode::FAILURE
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
