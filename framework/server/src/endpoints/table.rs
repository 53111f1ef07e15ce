//! `meta.k8s.io/v1` `Table`: what `kubectl get` prints. Columns are Name, the type's printer
//! columns, and Age, as kube-apiserver builds them for custom resources. Paths are parsed once,
//! when the resource is installed.

use serde_json::{Value, json};

use crate::endpoints::params::IncludeObject;
use crate::runtime::jsonpath::JsonPath;
use crate::runtime::object;
use crate::runtime::{ColumnType, ResourceInfo};

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

struct Column {
    definition: Value,
    /// `None` for the Name column, which shows the object's name.
    type_: Option<ColumnType>,
    path: Option<JsonPath>,
}

/// Turns objects of one kind into table rows.
pub struct TableConvertor {
    columns: Vec<Column>,
    definitions: Value,
}

impl std::fmt::Debug for TableConvertor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableConvertor")
            .field("columns", &self.columns.len())
            .finish()
    }
}

impl TableConvertor {
    /// The convertor of `info`'s printer columns. A column whose path does not parse shows
    /// `<none>`-like empty cells rather than failing every `kubectl get`.
    pub fn new(info: &ResourceInfo) -> Self {
        let mut columns = vec![Column {
            definition: json!({"name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0}),
            type_: None,
            path: None,
        }];
        for c in info.printer_columns {
            columns.push(Column {
                definition: json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}),
                type_: Some(c.type_),
                path: JsonPath::parse(c.json_path).ok(),
            });
        }
        columns.push(Column {
            definition: json!({"name": "Age", "type": "date", "format": "", "description": AGE_DESCRIPTION, "priority": 0}),
            type_: Some(ColumnType::Date),
            path: JsonPath::parse(".metadata.creationTimestamp").ok(),
        });
        let definitions = Value::Array(columns.iter().map(|c| c.definition.clone()).collect());
        Self {
            columns,
            definitions,
        }
    }

    /// A `Table` of `objects`, with list metadata `metadata`.
    pub fn table(&self, objects: &[Value], metadata: Value, include: IncludeObject) -> Value {
        let rows: Vec<Value> = objects.iter().map(|o| self.row(o, include)).collect();
        json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": self.definitions,
            "rows": rows,
        })
    }

    fn row(&self, object: &Value, include: IncludeObject) -> Value {
        let cells: Vec<Value> = self.columns.iter().map(|c| cell(c, object)).collect();
        let mut row = json!({"cells": cells});
        match include {
            // kube-apiserver's row has an empty RawExtension, which encodes as null.
            IncludeObject::None => row["object"] = Value::Null,
            IncludeObject::Metadata => row["object"] = partial_object_metadata(object),
            IncludeObject::Object => row["object"] = object.clone(),
        }
        row
    }
}

fn cell(column: &Column, object: &Value) -> Value {
    match (column.type_, &column.path) {
        (None, _) => json!(object::name(object).unwrap_or_default()),
        (Some(type_), Some(path)) => path.cell_value(object, type_),
        (Some(_), None) => Value::Null,
    }
}

/// An object's `PartialObjectMetadata`.
pub fn partial_object_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::PrinterColumn;

    const INFO: ResourceInfo = ResourceInfo {
        printer_columns: &[PrinterColumn {
            name: "Reference",
            type_: ColumnType::String,
            format: "",
            json_path: ".spec.reference",
            description: "",
            priority: 1,
        }],
        ..crate::test_kinds::TEST_INFO
    };

    #[test]
    fn rows_have_name_columns_and_age() {
        let t = TableConvertor::new(&INFO);
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}, "spec": {"reference": "r"}});
        let table = t.table(
            &[obj],
            json!({"resourceVersion": "3"}),
            IncludeObject::Metadata,
        );
        assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 3);
        assert_eq!(table["columnDefinitions"][1]["priority"], 1);
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "a");
        assert_eq!(cells[1], "r");
        assert!(cells[2].as_str().unwrap().contains('y'), "{cells}");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn missing_values_are_null() {
        let t = TableConvertor::new(&INFO);
        let table = t.table(
            &[json!({"metadata": {"name": "a"}})],
            json!({}),
            IncludeObject::None,
        );
        assert_eq!(table["rows"][0]["cells"][1], Value::Null);
        assert_eq!(table["rows"][0]["object"], Value::Null);
        assert!(table["rows"][0].as_object().unwrap().contains_key("object"));
    }
}
