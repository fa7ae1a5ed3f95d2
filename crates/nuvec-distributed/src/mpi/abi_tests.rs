//! `mpi_abi`: the hand-written declarations of `ffi.rs` checked against the installed
//! `mpi.h`, by compiling a small C program with `mpicc` and comparing what it prints.

use super::ffi::{
    Status, BYTE_SYMBOL, DATATYPE_SYMBOLS, ERRORS_RETURN_SYMBOL, IN_PLACE, MAX_ERROR_STRING,
    MAX_LIBRARY_VERSION_STRING, OP_SYMBOLS, SUCCESS, THREAD_SERIALIZED, WORLD_SYMBOL,
};

/// The `mpi.h` name of each predefined handle nuvec loads by its global's name.
const HANDLES: [(&str, &str); 19] = [
    ("MPI_COMM_WORLD", WORLD_SYMBOL),
    ("MPI_ERRORS_RETURN", ERRORS_RETURN_SYMBOL),
    ("MPI_BYTE", BYTE_SYMBOL),
    ("MPI_C_BOOL", DATATYPE_SYMBOLS[0]),
    ("MPI_UINT8_T", DATATYPE_SYMBOLS[1]),
    ("MPI_UINT16_T", DATATYPE_SYMBOLS[2]),
    ("MPI_UINT32_T", DATATYPE_SYMBOLS[3]),
    ("MPI_UINT64_T", DATATYPE_SYMBOLS[4]),
    ("MPI_INT8_T", DATATYPE_SYMBOLS[5]),
    ("MPI_INT16_T", DATATYPE_SYMBOLS[6]),
    ("MPI_INT32_T", DATATYPE_SYMBOLS[7]),
    ("MPI_INT64_T", DATATYPE_SYMBOLS[8]),
    ("MPI_FLOAT", DATATYPE_SYMBOLS[9]),
    ("MPI_DOUBLE", DATATYPE_SYMBOLS[10]),
    ("MPI_SUM", OP_SYMBOLS[0]),
    ("MPI_MAX", OP_SYMBOLS[1]),
    ("MPI_MIN", OP_SYMBOLS[2]),
    ("MPI_LOR", OP_SYMBOLS[3]),
    ("MPI_LAND", OP_SYMBOLS[4]),
];

fn c_program() -> String {
    let mut body = String::from(
        r#"#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("status_size %zu\n", sizeof(MPI_Status));
    printf("status_source %zu\n", offsetof(MPI_Status, MPI_SOURCE));
    printf("status_tag %zu\n", offsetof(MPI_Status, MPI_TAG));
    printf("status_error %zu\n", offsetof(MPI_Status, MPI_ERROR));
    printf("handle_size %zu\n", sizeof(MPI_Comm));
    printf("datatype_size %zu\n", sizeof(MPI_Datatype));
    printf("op_size %zu\n", sizeof(MPI_Op));
    printf("success %d\n", MPI_SUCCESS);
    printf("thread_serialized %d\n", (int)MPI_THREAD_SERIALIZED);
    printf("max_error_string %d\n", MPI_MAX_ERROR_STRING);
    printf("max_library_version_string %d\n", MPI_MAX_LIBRARY_VERSION_STRING);
    printf("in_place %zu\n", (size_t)MPI_IN_PLACE);
"#,
    );
    for (name, global) in HANDLES {
        body.push_str(&format!(
            "    printf(\"{name} %d\\n\", (void *){name} == (void *)&{global});\n"
        ));
    }
    body.push_str("    return 0;\n}\n");
    body
}

#[test]
fn mpi_abi_declarations_match_the_installed_mpi_h() {
    let Some(c) = crate::c_probe::c_values(
        "mpi_abi",
        "mpicc",
        &c_program(),
        "NUVEC_REQUIRE_MPI",
        "install libopenmpi-dev",
    ) else {
        return;
    };
    let pointer = size_of::<*mut u8>() as i64;
    let expected: [(&str, i64); 12] = [
        ("status_size", size_of::<Status>() as i64),
        ("status_source", std::mem::offset_of!(Status, source) as i64),
        ("status_tag", std::mem::offset_of!(Status, tag) as i64),
        ("status_error", std::mem::offset_of!(Status, error) as i64),
        ("handle_size", pointer),
        ("datatype_size", pointer),
        ("op_size", pointer),
        ("success", i64::from(SUCCESS)),
        ("thread_serialized", i64::from(THREAD_SERIALIZED)),
        ("max_error_string", MAX_ERROR_STRING as i64),
        (
            "max_library_version_string",
            MAX_LIBRARY_VERSION_STRING as i64,
        ),
        ("in_place", IN_PLACE as i64),
    ];
    for (name, ours) in expected {
        assert_eq!(
            c.get(name),
            Some(&ours),
            "{name}: mpi.h says {:?}",
            c.get(name)
        );
    }
    for (name, global) in HANDLES {
        assert_eq!(c.get(name), Some(&1), "{name} is not &{global} in mpi.h");
    }
}
