use super::*;

#[test]
fn the_cpu_is_the_default_device() {
    let cli = Cli::try_parse_from(["tchseq", "doctor"]).unwrap();
    assert_eq!(cli.global.device, DeviceArg::Cpu);
    let cli = Cli::try_parse_from(["tchseq", "doctor", "--device", "auto"]).unwrap();
    assert_eq!(cli.global.device, DeviceArg::Auto);
}

/// `--help` says what every option does: none is listed bare.
#[test]
fn every_option_of_every_command_has_help() {
    use clap::CommandFactory;
    fn bare(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            let id = arg.get_id().as_str();
            if id != "help" && id != "version" && arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path} {}", arg.get_long().map_or_else(|| id.to_string(), |l| format!("--{l}"))));
            }
        }
        for sub in cmd.get_subcommands() {
            bare(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut missing = Vec::new();
    bare(&Cli::command(), "tchseq", &mut missing);
    assert!(missing.is_empty(), "options without help: {missing:?}");
}
