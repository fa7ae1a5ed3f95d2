//! `#[derive(Tree)]`: lets a struct of arrays (a model's parameters, an optimizer's state) go
//! through nuvec's transforms as one value.
//!
//! Every field is a tree (an `Array`, a `Vec`, a map, another derived struct…) and is
//! flattened in declaration order, named by its field name (`layers.0.weight`), except fields
//! marked `#[tree(skip)]`, which are copied (`Clone`) from the original when the tree is
//! rebuilt, and the field marked `#[tree(state)]` (a `ModuleState`: training mode and frozen
//! parameters), which is copied too, visited by `Tree::visit_states` and part of the
//! structure. A field marked `#[tree(flatten)]` is a subtree whose leaves are named as the
//! struct's own (`weight`, not `projection.weight`). The generated code names
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

/// What a field is to the tree.
#[derive(PartialEq)]
enum Role {
    /// A subtree: flattened, rebuilt, named.
    Tree,
    /// `#[tree(skip)]`: copied when the tree is rebuilt.
    Skip,
    /// `#[tree(state)]`: the struct's `ModuleState`, copied when rebuilt, visited and part of
    /// the structure.
    State,
    /// `#[tree(flatten)]`: a subtree whose leaves are named as if they were the struct's own.
    Flatten,
}

/// The field's role from its `#[tree(...)]` attributes.
fn role(attrs: &[syn::Attribute]) -> syn::Result<Role> {
    let mut role = Role::Tree;
    for attr in attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                role = Role::Skip;
                Ok(())
            } else if meta.path.is_ident("state") {
                role = Role::State;
                Ok(())
            } else if meta.path.is_ident("flatten") {
                role = Role::Flatten;
                Ok(())
            } else {
                Err(meta.error("expected `skip`, `state` or `flatten`"))
            }
        })?;
    }
    Ok(role)
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
    let mut named = Vec::new();
    let mut states = Vec::new();
    for (index, field) in data.fields.iter().enumerate() {
        let member: syn::Member = match &field.ident {
            Some(ident) => ident.clone().into(),
            None => syn::Index::from(index).into(),
        };
        let field_name = match &field.ident {
            Some(ident) => ident.to_string(),
            None => index.to_string(),
        };
        let role = role(&field.attrs)?;
        if role == Role::State {
            states.push(quote! { visit(prefix, &mut self.#member); });
            structure.push(quote! {
                key.push(if self.#member.training { 'T' } else { 'E' });
            });
        }
        if role == Role::Skip || role == Role::State {
            rebuild.push(quote! { #member: ::std::clone::Clone::clone(&self.#member) });
        } else {
            let path = if role == Role::Flatten {
                quote! { ::std::string::ToString::to_string(prefix) }
            } else {
                quote! { #krate::transforms::tree::join_path(prefix, #field_name) }
            };
            named.push(quote! {
                #krate::transforms::Tree::flatten_named(&self.#member, &#path, leaves);
            });
            states.push(quote! {
                #krate::transforms::Tree::visit_states(&mut self.#member, &#path, visit);
            });
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
            fn flatten_named(
                &self,
                prefix: &str,
                leaves: &mut ::std::vec::Vec<(::std::string::String, #krate::Array)>,
            ) {
                #(#named)*
            }
            #[allow(unused_variables)]
            fn visit_states(
                &mut self,
                prefix: &str,
                visit: &mut dyn ::std::ops::FnMut(&str, &mut #krate::transforms::ModuleState),
            ) {
                #(#states)*
            }
        }
    })
}
