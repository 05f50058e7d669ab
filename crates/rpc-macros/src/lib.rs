//! The `service!` macro of [volley-rpc](https://docs.rs/volley-rpc): use it through
//! `volley_rpc::service!`, which passes its own path in first, so the generated code
//! names volley-rpc however the user's crate imports it.
//!
//! ```
//! use volley_rpc::{Context, HandlerError};
//!
//! volley_rpc::service! {
//!     /// Adds.
//!     pub service Adder {
//!         /// The sum.
//!         1 => fn add(a: u32, b: u32) -> u64;
//!     }
//! }
//!
//! struct Here;
//!
//! impl AdderServer for Here {
//!     async fn add(&self, _cx: Context<Adder>, a: u32, b: u32) -> Result<u64, HandlerError> {
//!         Ok(u64::from(a) + u64::from(b))
//!     }
//! }
//!
//! let router = Here.into_router();
//! assert_eq!(router.len(), 1);
//! assert_eq!(<adder::Add as volley_rpc::Method>::ID, 1);
//! ```
//!
//! From one declaration it makes the service's marker type, a module of marker types
//! (one per method, `adder::Add`), a client with one method per call, and a server trait
//! with one method per call. Declaring errors (two methods with one id or one name, a
//! one-way method with a result, a parameter that is not a plain name, a borrowed type)
//! are compile errors pointing at the offending token.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Ident, LitInt, Token, Type, Visibility, braced, parenthesized};

mod expand;

/// Declares a service; see `volley_rpc::service!` for the syntax and what it makes.
#[proc_macro]
pub fn service(input: TokenStream) -> TokenStream {
    match syn::parse::<Declaration>(input) {
        Ok(declaration) => match declaration.check() {
            Ok(()) => expand::expand(&declaration).into(),
            Err(e) => e.to_compile_error().into(),
        },
        Err(e) => e.to_compile_error().into(),
    }
}

/// `$crate; #[attrs] vis service Name { methods }`
pub(crate) struct Declaration {
    /// The path volley-rpc is reached by (`$crate` from the wrapping macro).
    pub(crate) krate: Tokens,
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) name: Ident,
    pub(crate) methods: Vec<MethodDecl>,
}

/// `#[attrs] ID => [oneway] fn name(param: Type, ..) [-> Output];`
pub(crate) struct MethodDecl {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) id: LitInt,
    pub(crate) one_way: bool,
    pub(crate) name: Ident,
    pub(crate) params: Vec<(Ident, Type)>,
    pub(crate) output: Option<Type>,
}

impl MethodDecl {
    /// The marker type's name: `put_file` becomes `PutFile`.
    pub(crate) fn marker(&self) -> Ident {
        let name = self.wire_name();
        let camel: String = name
            .split('_')
            .filter(|part| !part.is_empty())
            .map(|part| {
                let mut chars = part.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_uppercase().chain(chars).collect::<String>()
                })
            })
            .collect();
        format_ident!("{}", camel, span = self.name.span())
    }

    /// The name the peer and the logs see: the method's name without `r#`.
    pub(crate) fn wire_name(&self) -> String {
        self.name.unraw().to_string()
    }

    /// The arguments' type: `()`, the one parameter's type, or a tuple of them, spanned
    /// at the method so that an error about the tuple (a type serde cannot carry) points
    /// at it.
    pub(crate) fn args_type(&self) -> Tokens {
        let span = self.name.span();
        match self.params.as_slice() {
            [] => quote_spanned!(span=> ()),
            [(_, ty)] => quote!(#ty),
            many => {
                let types = many.iter().map(|(_, ty)| ty);
                quote_spanned!(span=> (#(#types,)*))
            }
        }
    }

    /// The result's type (`()` when none is written).
    pub(crate) fn output_type(&self) -> Tokens {
        match &self.output {
            Some(ty) => quote!(#ty),
            None => quote_spanned!(self.name.span()=> ()),
        }
    }
}

impl Parse for Declaration {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut krate = Tokens::new();
        while !input.peek(Token![;]) {
            let tt: proc_macro2::TokenTree = input.parse()?;
            krate.extend([tt]);
        }
        input.parse::<Token![;]>()?;
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let keyword: Ident = input.parse()?;
        if keyword != "service" {
            return Err(syn::Error::new(
                keyword.span(),
                "expected `service Name { .. }`",
            ));
        }
        let name: Ident = input.parse()?;
        let body;
        braced!(body in input);
        let mut methods = Vec::new();
        while !body.is_empty() {
            methods.push(body.parse()?);
        }
        if !input.is_empty() {
            return Err(input.error("one service per `service!`"));
        }
        Ok(Self {
            krate,
            attrs,
            vis,
            name,
            methods,
        })
    }
}

impl Parse for MethodDecl {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let id: LitInt = input.parse()?;
        id.base10_parse::<u32>()?;
        input.parse::<Token![=>]>()?;
        let one_way = if input.peek(Ident) && !input.peek(Token![fn]) {
            let word: Ident = input.parse()?;
            if word != "oneway" {
                return Err(syn::Error::new(word.span(), "expected `fn` or `oneway fn`"));
            }
            true
        } else {
            false
        };
        input.parse::<Token![fn]>()?;
        let name: Ident = input.parse()?;
        let inside;
        parenthesized!(inside in input);
        let params: Punctuated<Param, Token![,]> = Punctuated::parse_terminated(&inside)?;
        let output = if input.peek(Token![->]) {
            input.parse::<Token![->]>()?;
            Some(input.parse::<Type>()?)
        } else {
            None
        };
        input.parse::<Token![;]>()?;
        Ok(Self {
            attrs,
            id,
            one_way,
            name,
            params: params.into_iter().map(|p| (p.name, p.ty)).collect(),
            output,
        })
    }
}

struct Param {
    name: Ident,
    ty: Type,
}

impl Parse for Param {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name: Ident = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "a parameter is a plain name and a type: `key: String`",
            )
        })?;
        input.parse::<Token![:]>()?;
        Ok(Self {
            name,
            ty: input.parse()?,
        })
    }
}

impl Declaration {
    /// Errors a declaration can hold that parsing does not see.
    fn check(&self) -> syn::Result<()> {
        for (i, method) in self.methods.iter().enumerate() {
            let id: u32 = method.id.base10_parse()?;
            for earlier in &self.methods[..i] {
                if earlier.id.base10_parse::<u32>()? == id {
                    return Err(syn::Error::new(
                        method.id.span(),
                        format!(
                            "methods `{}` and `{}` of `{}` share the id {id}",
                            earlier.name, method.name, self.name
                        ),
                    ));
                }
                if earlier.name == method.name {
                    return Err(syn::Error::new(
                        method.name.span(),
                        format!("`{}` has two methods named `{}`", self.name, method.name),
                    ));
                }
            }
            let unit = |ty: &Type| matches!(ty, Type::Tuple(t) if t.elems.is_empty());
            match &method.output {
                Some(output) if method.one_way && !unit(output) => {
                    return Err(syn::Error::new_spanned(
                        output,
                        "a one-way method has no result: drop the `-> ..`",
                    ));
                }
                _ => {}
            }
            for earlier in &self.methods[..i] {
                if earlier.marker() == method.marker() {
                    return Err(syn::Error::new(
                        method.name.span(),
                        format!(
                            "methods `{}` and `{}` of `{}` would both be named by the type \
                             `{}::{}`: rename one of them",
                            earlier.name,
                            method.name,
                            self.name,
                            self.module(),
                            method.marker()
                        ),
                    ));
                }
            }
            for ty in method.params.iter().map(|(_, ty)| ty).chain(&method.output) {
                owned(ty)?;
            }
            for (name, _) in &method.params {
                if name == "cx" {
                    return Err(syn::Error::new(
                        name.span(),
                        "`cx` is the handler's context: name the parameter otherwise",
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Declaration {
    /// The module holding the method markers: the service's name in snake case
    /// (`KeyValue` becomes `key_value`).
    pub(crate) fn module(&self) -> Ident {
        let name = self.name.unraw().to_string();
        let chars: Vec<char> = name.chars().collect();
        let mut snake = String::with_capacity(name.len() + 4);
        for (i, &c) in chars.iter().enumerate() {
            if c.is_uppercase() {
                let after_lower =
                    i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
                let acronym_end = i > 0
                    && chars[i - 1].is_uppercase()
                    && chars.get(i + 1).is_some_and(|n| n.is_lowercase());
                if after_lower || acronym_end {
                    snake.push('_');
                }
                snake.extend(c.to_lowercase());
            } else {
                snake.push(c);
            }
        }
        // A service named `Type` gets the module `r#type`.
        if syn::parse_str::<Ident>(&snake).is_ok() {
            Ident::new(&snake, self.name.span())
        } else {
            Ident::new_raw(&snake, self.name.span())
        }
    }
}

/// Refuses a borrowed type (`&str`, `&[u8]`, `Vec<&T>`) where arguments and results
/// travel by value, saying what to write instead.
fn owned(ty: &Type) -> syn::Result<()> {
    match ty {
        Type::Reference(r) => {
            let instead = match &*r.elem {
                Type::Path(p) if p.path.is_ident("str") => "`String`".to_owned(),
                Type::Slice(s) if matches!(&*s.elem, Type::Path(p) if p.path.is_ident("u8")) => {
                    "`Vec<u8>`, or `bytes::Bytes` sent as a segment beside the arguments".to_owned()
                }
                Type::Slice(s) => {
                    let elem = &s.elem;
                    format!("`Vec<{}>`", quote!(#elem))
                }
                elem => format!("`{}`", quote!(#elem)),
            };
            Err(syn::Error::new_spanned(
                ty,
                format!(
                    "arguments and results travel by value, so they cannot be borrowed: \
                     write {instead}"
                ),
            ))
        }
        Type::Tuple(t) => t.elems.iter().try_for_each(owned),
        Type::Array(a) => owned(&a.elem),
        Type::Slice(s) => owned(&s.elem),
        Type::Paren(p) => owned(&p.elem),
        Type::Group(g) => owned(&g.elem),
        Type::Path(p) => {
            for segment in &p.path.segments {
                if let syn::PathArguments::AngleBracketed(args) = &segment.arguments {
                    for arg in &args.args {
                        match arg {
                            syn::GenericArgument::Type(t) => owned(t)?,
                            syn::GenericArgument::Lifetime(l) if l.ident != "static" => {
                                return Err(syn::Error::new_spanned(
                                    l,
                                    "arguments and results travel by value, so they cannot \
                                     borrow: use the type's owned form (`String` for \
                                     `Cow<str>`)",
                                ));
                            }
                            _ => {}
                        }
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A span for generated names that point nowhere in particular.
pub(crate) fn here() -> Span {
    Span::call_site()
}
