//! What a declaration expands to: the service and method markers, the client, the server
//! trait.

use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote, quote_spanned};
use syn::Attribute;

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
        let method = m.name.to_string();
        let args = m.args_type().to_string();
        let output = m.output_type().to_string();
        quote!(#id, #kind, #method, #args, #output,)
    });
    let table = methods.iter().map(|m| {
        let id = &m.id;
        let method = m.name.to_string();
        quote!((#id, #method),)
    });
    let entries = methods.iter().map(|m| {
        let id = &m.id;
        let one_way = m.one_way;
        let types = types_fingerprint(krate, m);
        quote!(#krate::service::MethodEntry { id: #id, one_way: #one_way, types: #types },)
    });
    let per_method = methods.iter().map(|m| method_marker(d, m));
    quote! {
        #(#attrs)*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #vis struct #name;

        impl #krate::Service for #name {
            const NAME: &'static str = #name_str;
            const FINGERPRINT: u64 = #krate::service::fingerprint(&[#name_str, #(#parts)*]);
            const METHODS: &'static [(u32, &'static str)] = &[#(#table)*];
            const TABLE: &'static [#krate::service::MethodEntry] = &[#(#entries)*];
        }

        #(#per_method)*
    }
}

/// The `const` expression of a method's [`Method::TYPES`]: its kind, argument type and
/// result type, as written.
fn types_fingerprint(krate: &Tokens, m: &MethodDecl) -> Tokens {
    let kind = if m.one_way { "oneway" } else { "sync" };
    let args = m.args_type().to_string();
    let output = m.output_type().to_string();
    quote!(#krate::service::fingerprint(&[#kind, #args, #output]))
}

fn method_marker(d: &Declaration, m: &MethodDecl) -> Tokens {
    let Declaration {
        krate, vis, name, ..
    } = d;
    let marker = m.marker();
    let id = &m.id;
    let method = m.name.to_string();
    let args = m.args_type();
    let output = m.output_type();
    let one_way = m.one_way;
    let types = types_fingerprint(krate, m);
    let docs = docs(&m.attrs);
    let what = format!(
        "The method `{method}` of [`{name}`] (id {id}), as a type: names it to \
         `Router::route` and the low-level calls of `Peer`."
    );
    quote! {
        #(#docs)*
        ///
        #[doc = #what]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #vis struct #marker;

        impl #krate::Method for #marker {
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
    let calls = d.methods.iter().map(|m| {
        let attrs = &m.attrs;
        let method = &m.name;
        let marker = m.marker();
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
    quote! {
        #[doc = #about]
        #vis struct #client<C: #krate::Codec = #krate::Bincode> {
            caller: #krate::Caller<#name, C>,
        }

        impl<C: #krate::Codec> #client<C> {
            /// Calls through `caller`: a [`Peer`](volley_rpc::Peer) (one connection) or a
            /// [`Reconnecting`](volley_rpc::Reconnecting) client (made again when lost).
            #vis fn new(caller: impl ::core::convert::Into<#krate::Caller<#name, C>>) -> Self {
                Self { caller: caller.into() }
            }

            /// What the calls go through.
            #vis fn caller(&self) -> &#krate::Caller<#name, C> {
                &self.caller
            }

            #(#calls)*
        }

        impl<C: #krate::Codec> ::core::convert::From<#krate::Peer<#name, C>> for #client<C> {
            fn from(peer: #krate::Peer<#name, C>) -> Self {
                Self::new(peer)
            }
        }

        impl<C: #krate::Codec> ::core::convert::From<#krate::Reconnecting<#name, C>> for #client<C> {
            fn from(client: #krate::Reconnecting<#name, C>) -> Self {
                Self::new(client)
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
    let routes = d.methods.iter().map(|m| {
        let method = &m.name;
        let marker = m.marker();
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
                    async move { this.#method(cx, #(#names),*).await }
                }
            })
        }
    });
    quote! {
        #[doc = #about]
        #vis trait #server<R = #name, C = #krate::Bincode>:
            ::core::marker::Send + ::core::marker::Sync + 'static
        where
            R: #krate::Service,
            C: #krate::Codec,
        {
            #(#signatures)*

            /// A router serving every method with `self` (shared by all connections).
            fn into_router(self) -> #krate::Router<#name, R, C>
            where
                Self: ::core::marker::Sized,
            {
                let this = ::std::sync::Arc::new(self);
                #krate::Router::new() #(#routes)*
            }
        }
    }
}
