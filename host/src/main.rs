fn main() -> std::process::ExitCode {
    outbox_host::cli::main()
}
