//! `#[derive(Tree)]`: lets a struct of arrays (a model's parameters, an optimizer's state) go
//! through nuvec's transforms as one value.
//!
//! Every field is a tree (an `Array`, a `Vec`, a map, another derived struct…) and is
//! flattened in declaration order, except fields marked `#[tree(skip)]`, which are copied
//! (`Clone`) from the original when the tree is rebuilt. The generated code names
//! `::nuvec`; a crate that depends on `nuvec-core` directly writes
//! `#[tree(crate = "nuvec_core")]` on the struct.
//!
//! ```ignore
//! #[derive(Tree)]
//! struct Linear {
//!     weight: Array,
//!     bias: Option<Array>,
//!     #[tree(skip)]
//!     name: String,
//! }
//! ```

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields, LitStr};

/// Implements `Tree` for a struct (named or tuple fields).
#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// Whether `attrs` hold `#[tree(skip)]`.
fn skipped(attrs: &[syn::Attribute]) -> syn::Result<bool> {
    let mut skip = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}

/// The crate path from `#[tree(crate = "...")]`, `::nuvec` by default.
fn crate_path(attrs: &[syn::Attribute]) -> syn::Result<syn::Path> {
    let mut path: syn::Path = syn::parse_quote!(::nuvec);
    for attr in attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let name: LitStr = meta.value()?.parse()?;
                path = name.parse()?;
                Ok(())
            } else {
                Err(meta.error("expected `crate = \"...\"`"))
            }
        })?;
    }
    Ok(path)
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let name = &input.ident;
    let krate = crate_path(&input.attrs)?;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            name,
            "#[derive(Tree)] works on structs",
        ));
    };
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let mut flatten = Vec::new();
    let mut rebuild = Vec::new();
    let mut structure = Vec::new();
    for (index, field) in data.fields.iter().enumerate() {
        let member: syn::Member = match &field.ident {
            Some(ident) => ident.clone().into(),
            None => syn::Index::from(index).into(),
        };
        if skipped(&field.attrs)? {
            rebuild.push(quote! { #member: ::std::clone::Clone::clone(&self.#member) });
        } else {
            flatten.push(quote! {
                #krate::transforms::Tree::flatten_into(&self.#member, leaves);
            });
            structure.push(quote! {
                #krate::transforms::Tree::structure(&self.#member, key);
            });
            rebuild.push(quote! {
                #member: #krate::transforms::Tree::rebuild(&self.#member, leaves)?
            });
        }
    }
    let built = match &data.fields {
        Fields::Unit => quote! { #name },
        _ => quote! { #name { #(#rebuild),* } },
    };
    Ok(quote! {
        impl #impl_generics #krate::transforms::Tree for #name #type_generics #where_clause {
            fn flatten_into(&self, leaves: &mut ::std::vec::Vec<#krate::Array>) {
                #(#flatten)*
            }
            fn rebuild(
                &self,
                leaves: &mut dyn ::std::iter::Iterator<Item = #krate::Array>,
            ) -> #krate::Result<Self> {
                ::std::result::Result::Ok(#built)
            }
            fn structure(&self, key: &mut ::std::string::String) {
                key.push_str(::std::concat!(::std::stringify!(#name), "{"));
                #(#structure)*
                key.push('}');
            }
        }
    })
}
