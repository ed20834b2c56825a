//! `vireo-server`: one Vireo node on glommio, served to any Iggy 0.9 client (`vireo_node::server`).

fn main() -> std::process::ExitCode {
    vireo_node::server::process::main()
}
