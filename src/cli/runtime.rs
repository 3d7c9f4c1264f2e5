//! `qdq-studio runtime [--json]` and `qdq-studio runtime install [--flavor F]`.

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

use qdq_studio::runtime::{self, EpState, FetchEvent, FetchOptions, Flavor, LoadOptions, Runtime};

/// Arguments of `runtime`.
#[derive(Debug, clap::Args)]
pub struct RuntimeArgs {
    /// What to do (default: show the loaded runtime).
    #[command(subcommand)]
    pub action: Option<RuntimeAction>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not download a runtime when none is found.
    #[arg(long)]
    pub no_download: bool,
}

/// `runtime` actions.
#[derive(Debug, clap::Subcommand)]
pub enum RuntimeAction {
    /// Download the pinned official ONNX Runtime build into the cache and make it active.
    Install {
        /// Which build: cpu; gpu (CUDA + TensorRT); directml (Windows); openvino.
        #[arg(long, value_enum, default_value_t = Flavor::Cpu)]
        flavor: Flavor,
        /// A package index to download from instead of pip's configured one.
        #[arg(long)]
        index_url: Option<String>,
    },
    /// Download the pinned build for a platform (this one or another) and unpack its
    /// libraries into a folder, sha256-checked, without making it active: for packaging.
    Unpack {
        /// Which build: cpu; gpu (CUDA + TensorRT); directml (Windows); openvino.
        #[arg(long, value_enum, default_value_t = Flavor::Cpu)]
        flavor: Flavor,
        /// The platform, `OS-ARCH` (`windows-x86_64`, `linux-x86_64`).
        #[arg(long)]
        platform: String,
        /// The folder to unpack into (replaced whole).
        #[arg(long)]
        to: std::path::PathBuf,
        /// A package index to download from instead of pip's configured one.
        #[arg(long)]
        index_url: Option<String>,
    },
}

/// Prints fetch progress on stderr.
pub fn print_progress(event: FetchEvent) {
    match event {
        FetchEvent::Downloading { package, version } => {
            eprintln!("downloading {package}=={version} ...")
        }
        FetchEvent::Log(_) => {}
        FetchEvent::Verifying => eprintln!("verifying sha256 ..."),
        FetchEvent::Extracting { done, total } if done == total => {
            eprintln!("unpacked {done} bytes")
        }
        FetchEvent::Extracting { .. } => {}
        FetchEvent::Done => {}
    }
}

/// `qdq-studio --version`: the app, the ONNX Runtime library it finds (without fetching one)
/// and the state of each execution provider.
pub fn print_versions() {
    println!("qdq-studio {}", env!("CARGO_PKG_VERSION"));
    let loaded = LoadOptions::new()
        .map_err(anyhow::Error::from)
        .and_then(|mut options| {
            options.allow_download = false;
            Runtime::load(&options, &mut |_| {}).map_err(anyhow::Error::from)
        });
    match loaded {
        Ok(runtime) => {
            let info = runtime.info();
            println!(
                "ONNX Runtime {} ({}: {})",
                info.version,
                info.source,
                info.path.display()
            );
            let eps: Vec<String> = runtime
                .probe_eps()
                .into_iter()
                .map(|status| {
                    let state = match status.state {
                        EpState::Ready => "ready",
                        EpState::Unavailable(_) => "cannot run here",
                        EpState::NotInLibrary(_) => "not in this build",
                    };
                    format!("{} ({state})", status.ep)
                })
                .collect();
            println!("execution providers: {}", eps.join(", "));
        }
        Err(e) => println!(
            "ONNX Runtime: none found ({}); `qdq-studio runtime install` fetches it",
            format!("{e:#}").replace('\n', " ")
        ),
    }
}

/// Runs `runtime`.
pub fn run(args: &RuntimeArgs) -> anyhow::Result<()> {
    let mut options = LoadOptions::new()?;
    if let Some(RuntimeAction::Unpack {
        flavor,
        platform,
        to,
        index_url,
    }) = &args.action
    {
        let Some((os, arch)) = platform.split_once('-') else {
            anyhow::bail!("bad --platform '{platform}': expected OS-ARCH, e.g. windows-x86_64");
        };
        let fetch = FetchOptions {
            index_url: index_url.clone(),
            ..FetchOptions::default()
        };
        let written =
            runtime::unpack_for_platform(*flavor, os, arch, to, &fetch, &mut print_progress)?;
        for path in written {
            println!("{}", path.display());
        }
        return Ok(());
    }
    if let Some(RuntimeAction::Install { flavor, index_url }) = &args.action {
        options.fetch = FetchOptions {
            index_url: index_url.clone(),
            ..FetchOptions::default()
        };
        let path = runtime::install(
            &options.cache_dir,
            *flavor,
            &options.fetch,
            &mut print_progress,
        )?;
        let version = runtime::check_library(&path)?;
        println!(
            "installed ONNX Runtime {version} ({}) at {}",
            flavor.name(),
            path.display()
        );
        return Ok(());
    }
    options.allow_download = !args.no_download;
    let runtime = Runtime::load(&options, &mut print_progress)?;
    let eps = runtime.probe_eps();
    if args.json {
        let value = serde_json::json!({ "runtime": runtime.info(), "execution_providers": eps });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let info = runtime.info();
    println!("ONNX Runtime {} ({})", info.version, info.source);
    println!("library      {}", info.path.display());
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(["provider", "ONNX Runtime name", "state"]);
    if table.width().is_none() {
        table.set_width(110);
    }
    for status in eps {
        let state = match status.state {
            EpState::Ready => "ready".to_owned(),
            EpState::Unavailable(reason) => format!("cannot run here: {reason}"),
            EpState::NotInLibrary(hint) => format!("not in this build: {hint}"),
        };
        table.add_row([status.ep.to_string(), status.ort_name, state]);
    }
    println!("{table}");
    Ok(())
}
