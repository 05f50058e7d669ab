//! What a declaration expands to: the service and method markers, the client, the server
//! trait.

use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote, quote_spanned};
use syn::{Attribute, Visibility};

use crate::{Declaration, MethodDecl, here};

pub(crate) fn expand(d: &Declaration) -> Tokens {
    let markers = markers(d);
    let client = client(d);
    let server = server(d);
    quote! {
        #markers
        #client
        #server
    }
}

fn docs(attrs: &[Attribute]) -> Vec<&Attribute> {
    attrs.iter().filter(|a| a.path().is_ident("doc")).collect()
}

/// The service's marker, its `Service` impl, and a marker per method.
fn markers(d: &Declaration) -> Tokens {
    let Declaration {
        krate,
        attrs,
        vis,
        name,
        methods,
    } = d;
    let name_str = name.to_string();
    let parts = methods.iter().map(|m| {
        let id = m.id.to_string();
        let kind = if m.one_way { "oneway" } else { "sync" };
        let method = m.wire_name();
        let args = m.args_type().to_string();
        let output = m.output_type().to_string();
        quote!(#id, #kind, #method, #args, #output,)
    });
    let table = methods.iter().map(|m| {
        let id = &m.id;
        let method = m.wire_name();
        quote!((#id, #method),)
    });
    let entries = methods.iter().map(|m| {
        let id = &m.id;
        let one_way = m.one_way;
        let types = types_fingerprint(krate, m);
        quote!(#krate::__private::MethodEntry { id: #id, one_way: #one_way, types: #types },)
    });
    let module = d.module();
    let inner = inner_vis(vis);
    let declared = methods.iter().map(|m| {
        let marker = m.marker();
        let docs = docs(&m.attrs);
        let what = format!(
            "The method `{}` of [`{name}`](super::{name}) (id {}), as a type: names it to \
             `Router::route`, `Router::handle` and the low-level calls of `Peer`.",
            m.wire_name(),
            m.id
        );
        quote_spanned! {m.name.span()=>
            #(#docs)*
            ///
            #[doc = #what]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
            #inner struct #marker;
        }
    });
    let about = format!(
        "The methods of [`{name}`](super::{name}), one type each (`{module}::{}`).",
        methods
            .first()
            .map_or_else(|| "Method".to_owned(), |m| m.marker().to_string())
    );
    let per_method = methods.iter().map(|m| method_marker(d, m));
    quote! {
        #(#attrs)*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #vis struct #name;

        impl #krate::Service for #name {
            const NAME: &'static str = #name_str;
            const FINGERPRINT: u64 = #krate::__private::fingerprint(&[#name_str, #(#parts)*]);
            const METHODS: &'static [(u32, &'static str)] = &[#(#table)*];
            const TABLE: &'static [#krate::__private::MethodEntry] = &[#(#entries)*];
        }

        #[doc = #about]
        #vis mod #module {
            #(#declared)*
        }

        #(#per_method)*
    }
}

/// The visibility of the markers inside the service's module: what `vis` means outside
/// it (`pub(super)` for a private service, `pub(in super::super)` for `pub(super)`).
fn inner_vis(vis: &Visibility) -> Tokens {
    match vis {
        Visibility::Public(_) => quote!(pub),
        Visibility::Inherited => quote!(pub(super)),
        Visibility::Restricted(r) => {
            let path = &r.path;
            let first = path.segments.first().map(|s| s.ident.to_string());
            match first.as_deref() {
                Some("crate") if path.segments.len() == 1 => quote!(pub(crate)),
                Some("self") if path.segments.len() == 1 => quote!(pub(super)),
                Some("super") if r.in_token.is_none() => quote!(pub(in super::super)),
                Some("crate") => quote!(pub(in #path)),
                _ if path.leading_colon.is_some() => quote!(pub(in #path)),
                _ => quote!(pub(in super::#path)),
            }
        }
    }
}

/// The `const` expression of a method's [`Method::TYPES`]: its kind, argument type and
/// result type, as written.
fn types_fingerprint(krate: &Tokens, m: &MethodDecl) -> Tokens {
    let kind = if m.one_way { "oneway" } else { "sync" };
    let args = m.args_type().to_string();
    let output = m.output_type().to_string();
    quote!(#krate::__private::fingerprint(&[#kind, #args, #output]))
}

fn method_marker(d: &Declaration, m: &MethodDecl) -> Tokens {
    let Declaration { krate, name, .. } = d;
    let module = d.module();
    let marker = m.marker();
    let id = &m.id;
    let method = m.wire_name();
    let args = m.args_type();
    let output = m.output_type();
    let one_way = m.one_way;
    let types = types_fingerprint(krate, m);
    // Spanned at the method, so a type that cannot travel (no `Serialize`) is reported
    // at the method's declaration.
    quote_spanned! {m.name.span()=>
        impl #krate::Method for #module::#marker {
            type Service = #name;
            type Args = #args;
            type Output = #output;
            const ID: u32 = #id;
            const NAME: &'static str = #method;
            const ONE_WAY: bool = #one_way;
            const TYPES: u64 = #types;
        }
    }
}

/// `NameClient`: a method per call, arguments by value, options on the returned request.
fn client(d: &Declaration) -> Tokens {
    let Declaration {
        krate, vis, name, ..
    } = d;
    let client = format_ident!("{}Client", name, span = here());
    let about = format!(
        "Calls [`{name}`]'s methods on a connection. Each method takes the arguments by \
         value and returns a request: `.await` it for the result, or first set \
         `.segments(..)`, `.deadline(..)` or `.reply()` (the result with the segments that \
         came back)."
    );
    let module = d.module();
    let calls = d.methods.iter().map(|m| {
        let attrs = &m.attrs;
        let method = &m.name;
        let marker = m.marker();
        let marker = quote!(#module::#marker);
        let params = m.params.iter().map(|(p, ty)| quote!(#p: #ty));
        let names: Vec<_> = m.params.iter().map(|(p, _)| p).collect();
        let args = match names.as_slice() {
            [] => quote!(()),
            [one] => quote!(#one),
            many => quote!((#(#many,)*)),
        };
        let ret = if m.one_way {
            quote!(#krate::OneWay<'_, #marker, C>)
        } else {
            quote!(#krate::Request<'_, #marker, C>)
        };
        quote! {
            #(#attrs)*
            #vis fn #method(&self, #(#params),*) -> #ret {
                <#ret>::new(&self.caller, #args)
            }
        }
    });
    // A method of the service may take the name of a helper: the method wins, and the
    // helper's work stays reachable (`From`, `Clone`).
    let taken = |helper: &str| d.methods.iter().any(|m| m.wire_name() == helper);
    let new = (!taken("new")).then(|| {
        quote! {
            /// Calls through `caller`: a [`Peer`](volley_rpc::Peer) (one connection) or a
            /// [`Reconnecting`](volley_rpc::Reconnecting) client (made again when lost).
            #vis fn new(caller: impl ::core::convert::Into<#krate::Caller<#name, C>>) -> Self {
                Self { caller: caller.into() }
            }
        }
    });
    let caller = (!taken("caller")).then(|| {
        quote! {
            /// What the calls go through.
            #vis fn caller(&self) -> &#krate::Caller<#name, C> {
                &self.caller
            }
        }
    });
    quote! {
        #[doc = #about]
        #vis struct #client<C: #krate::Codec = #krate::Bincode> {
            caller: #krate::Caller<#name, C>,
        }

        // The methods are the service's: a name clippy expects other things of (`new`,
        // `into_*`) is the declaration's choice.
        #[allow(clippy::wrong_self_convention, clippy::new_ret_no_self)]
        impl<C: #krate::Codec> #client<C> {
            #new
            #caller
            #(#calls)*
        }

        impl<C: #krate::Codec> ::core::convert::From<#krate::Caller<#name, C>> for #client<C> {
            fn from(caller: #krate::Caller<#name, C>) -> Self {
                Self { caller }
            }
        }

        impl<C: #krate::Codec> ::core::convert::From<#krate::Peer<#name, C>> for #client<C> {
            fn from(peer: #krate::Peer<#name, C>) -> Self {
                Self { caller: peer.into() }
            }
        }

        impl<C: #krate::Codec> ::core::convert::From<#krate::Reconnecting<#name, C>> for #client<C> {
            fn from(client: #krate::Reconnecting<#name, C>) -> Self {
                Self { caller: client.into() }
            }
        }

        impl<C> ::core::clone::Clone for #client<C>
        where
            C: #krate::Codec,
        {
            fn clone(&self) -> Self {
                Self { caller: self.caller.clone() }
            }
        }

        impl<C: #krate::Codec> ::core::fmt::Debug for #client<C> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#client)).field("caller", &self.caller).finish()
            }
        }
    }
}

/// `NameServer`: a method per call; a missing one does not compile.
fn server(d: &Declaration) -> Tokens {
    let Declaration {
        krate, vis, name, ..
    } = d;
    let server = format_ident!("{}Server", name, span = here());
    let about = format!(
        "Serves [`{name}`]: one method per call, each given the call's [`Context`]({krate_doc}::Context) \
         and its arguments. Implement it (with `async fn` if you like) and serve \
         [`into_router`](Self::into_router). `R` is the service this end calls back (the \
         same by default); `C` the codec.",
        krate_doc = "volley_rpc"
    );
    let signatures = d.methods.iter().map(|m| {
        let docs = docs(&m.attrs);
        let method = &m.name;
        let params = m.params.iter().map(|(p, ty)| quote!(#p: #ty));
        let output = m.output_type();
        // Spanned at the declaration, so an error about the method (an impl leaving it
        // out) points at its line.
        quote_spanned! {m.name.span()=>
            #(#docs)*
            fn #method(
                &self,
                cx: #krate::Context<R, C>,
                #(#params),*
            ) -> impl ::core::future::Future<
                Output = ::core::result::Result<#output, #krate::HandlerError>,
            > + ::core::marker::Send;
        }
    });
    let module = d.module();
    let routes = d.methods.iter().map(|m| {
        let method = &m.name;
        let marker = m.marker();
        let marker = quote!(#module::#marker);
        let names: Vec<_> = (0..m.params.len())
            .map(|i| format_ident!("arg{}", i, span = here()))
            .collect();
        let pattern = match names.as_slice() {
            [] => quote!(()),
            [one] => quote!(#one),
            many => quote!((#(#many,)*)),
        };
        quote! {
            .handle(#marker, {
                let this = this.clone();
                move |cx, #pattern| {
                    let this = this.clone();
                    async move { <S as #server<R, C>>::#method(&*this, cx, #(#names),*).await }
                }
            })
        }
    });
    let into_router = d
        .methods
        .iter()
        .all(|m| m.wire_name() != "into_router")
        .then(|| {
            quote! {
                /// A router serving every method with `self` (shared by all connections):
                /// [`#name::router(self)`](#name::router).
                fn into_router(self) -> #krate::Router<#name, R, C>
                where
                    Self: ::core::marker::Sized,
                {
                    #name::router(self)
                }
            }
        });
    let router_about = format!(
        "A router serving every method of [`{name}`] with `server` (shared by all \
         connections); the same as `server.into_router()`."
    );
    quote! {
        #[doc = #about]
        #[allow(clippy::wrong_self_convention, clippy::new_ret_no_self)]
        #vis trait #server<R = #name, C = #krate::Bincode>:
            ::core::marker::Send + ::core::marker::Sync + 'static
        where
            R: #krate::Service,
            C: #krate::Codec,
        {
            #(#signatures)*

            #into_router
        }

        impl #name {
            #[doc = #router_about]
            #vis fn router<S, R, C>(server: S) -> #krate::Router<#name, R, C>
            where
                S: #server<R, C>,
                R: #krate::Service,
                C: #krate::Codec,
            {
                let this = ::std::sync::Arc::new(server);
                #krate::Router::new() #(#routes)*
            }
        }
    }
}
