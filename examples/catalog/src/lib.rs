//! A computed resource next to a stored one: `Book`s are stored as any resource; `Author`s
//! are computed from them (one per author of the books of a namespace) by a [`Provider`]
//! that reads the books through the server's storage configuration. The framework serves
//! authors with selectors, pages, columns, resourceVersions and watch; writes are refused.

use std::collections::BTreeMap;
use std::time::Duration;

use extension_apiserver::prelude::*;

/// The API group.
pub const GROUP: &str = "catalog.example.com";

/// How often authors are computed again while anyone watches them.
pub const RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// A book: stored, written by clients.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "catalog.example.com",
    version = "v1alpha1",
    kind = "Book",
    namespaced,
    shortnames = ["bk"],
    printcolumn(name = "Author", type = "string", json_path = ".spec.author"),
    printcolumn(name = "Genre", type = "string", json_path = ".spec.genre"),
    printcolumn(name = "Pages", type = "integer", json_path = ".spec.pages", priority = 1),
    validate = validate_book
)]
pub struct Book {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the book is.
    #[serde(default)]
    pub spec: BookSpec,
}

/// What a book is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BookSpec {
    /// Who wrote it.
    #[serde(default)]
    pub author: String,
    /// Its genre, e.g. `scifi`.
    #[serde(default)]
    pub genre: String,
    /// How many pages it has.
    #[serde(default)]
    pub pages: i64,
}

fn validate_book(book: &Book) -> Vec<FieldError> {
    if author_name(&book.spec.author).is_empty() {
        return vec![FieldError::required("spec.author", "a book has an author")];
    }
    Vec::new()
}

/// An author: computed from the books of a namespace, never written.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "catalog.example.com",
    version = "v1alpha1",
    kind = "Author",
    namespaced,
    shortnames = ["au"],
    printcolumn(name = "Books", type = "integer", json_path = ".books"),
    printcolumn(name = "Pages", type = "integer", json_path = ".pages"),
    printcolumn(name = "Genres", type = "string", json_path = ".genres", priority = 1)
)]
pub struct Author {
    /// Name (the author's, as a DNS label) and label `genre`: the genre of every book of the
    /// author, or `mixed`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// How many books of the namespace the author wrote.
    pub books: i64,
    /// Their pages, together.
    pub pages: i64,
    /// Their genres, sorted, once each.
    pub genres: Vec<String>,
}

/// An author's name as an object name: lower case, anything but letters and digits a dash.
pub fn author_name(author: &str) -> String {
    let name: String = author
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.trim_matches('-').to_string()
}

/// The authors of `books`, one per namespace and author, in name order.
pub fn authors_of(books: &[Book]) -> Vec<Author> {
    let mut by_author: BTreeMap<(String, String), Vec<&Book>> = BTreeMap::new();
    for book in books {
        let namespace = book.metadata.namespace.clone().unwrap_or_default();
        let name = author_name(&book.spec.author);
        by_author.entry((namespace, name)).or_default().push(book);
    }
    by_author
        .into_iter()
        .map(|((namespace, name), books)| author(namespace, name, &books))
        .collect()
}

fn author(namespace: String, name: String, books: &[&Book]) -> Author {
    let mut genres: Vec<String> = books.iter().map(|b| b.spec.genre.clone()).collect();
    genres.sort();
    genres.dedup();
    let genre = match genres.as_slice() {
        [one] => one.clone(),
        _ => "mixed".to_string(),
    };
    Author {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            labels: Some(BTreeMap::from([("genre".to_string(), genre)])),
            ..ObjectMeta::default()
        },
        books: books.len() as i64,
        pages: books.iter().map(|b| b.spec.pages).sum(),
        genres,
    }
}

/// Computes authors from the stored books.
pub struct Authors {
    books: Reader<Book>,
}

#[async_trait]
impl Provider for Authors {
    type Object = Author;

    async fn list(&self, namespace: Option<&str>) -> extension_apiserver::Result<Vec<Author>> {
        Ok(authors_of(&self.books.list(namespace).await?))
    }
}

/// The `catalog.example.com` group: books, and authors re-computed every
/// [`RELIST_INTERVAL`] while watched.
pub fn api_group() -> APIGroup {
    api_group_with(ComputedOptions::default().relist_interval(RELIST_INTERVAL))
}

/// The group with authors served with `options` (tests shorten the compaction interval).
pub fn api_group_with(options: ComputedOptions) -> APIGroup {
    APIGroup::new(GROUP).version("v1alpha1", |v| {
        v.resource::<Book>()
            .computed_with(options, |storage| Authors {
                books: storage.reader::<Book>(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(namespace: &str, author: &str, genre: &str, pages: i64) -> Book {
        Book {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            spec: BookSpec {
                author: author.into(),
                genre: genre.into(),
                pages,
            },
        }
    }

    #[test]
    fn one_author_per_namespace_and_name_with_totals_and_a_genre_label() {
        let books = [
            book("a", "Ursula K. Le Guin", "scifi", 300),
            book("a", "ursula k le guin", "fantasy", 200),
            book("a", "Frank Herbert", "scifi", 600),
            book("b", "Frank Herbert", "scifi", 100),
        ];
        let authors = authors_of(&books);
        let names: Vec<_> = authors
            .iter()
            .map(|a| {
                let meta = &a.metadata;
                (meta.namespace.clone().unwrap(), meta.name.clone().unwrap())
            })
            .collect();
        assert_eq!(
            names,
            [
                ("a".into(), "frank-herbert".into()),
                ("a".into(), "ursula-k--le-guin".into()),
                ("a".into(), "ursula-k-le-guin".into()),
                ("b".to_string(), "frank-herbert".to_string()),
            ]
        );
        let herbert = &authors[0];
        assert_eq!((herbert.books, herbert.pages), (1, 600));
        assert_eq!(herbert.metadata.labels.as_ref().unwrap()["genre"], "scifi");
    }

    #[test]
    fn several_genres_are_mixed() {
        let authors = authors_of(&[book("a", "x", "scifi", 1), book("a", "x", "fantasy", 2)]);
        assert_eq!(authors[0].genres, ["fantasy", "scifi"]);
        assert_eq!(
            authors[0].metadata.labels.as_ref().unwrap()["genre"],
            "mixed"
        );
        assert_eq!((authors[0].books, authors[0].pages), (2, 3));
    }
}
