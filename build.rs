//! The built-in library (`workflows/`, `templates/`, `schemas/`) is embedded into the binary;
//! rebuild when any file in it changes.

fn main() {
    for folder in ["workflows", "templates", "schemas"] {
        println!("cargo:rerun-if-changed={folder}");
    }
}
