//! What the `service!` declaration refuses at compile time, with the errors a user sees:
//! a server missing a method, a call with an argument of the wrong type, two methods
//! with one id, a one-way method with a result, borrowed arguments (`&str`, `&[u8]`
//! inside an `Option`), an argument serde cannot carry (reported at its method), two
//! method names that make one marker type. The `.stderr` files are this toolchain's
//! messages (`TRYBUILD=overwrite cargo test -p volley-rpc --test compile_fail` renews
//! them after a compiler upgrade).

#[test]
fn mistakes_in_services_do_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
