// glibc's malloc was the server's largest cost in profiles of the delivery drain
// (docs/benchmarks.md, "The allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    switchboard::cli::main()
}
