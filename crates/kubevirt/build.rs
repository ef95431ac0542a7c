//! Compiles the vendored kubelet protos (`proto/`) with tonic-build; protoc comes from the
//! system (Debian's `protobuf-compiler`, installed by `tools/install-deps`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(
            &[
                "proto/deviceplugin/v1beta1/api.proto",
                "proto/podresources/v1/api.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
