package main

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// unknownKeys walks a YAML document alongside the Go type it is decoded
// into and returns one error per mapping key that type has no field for,
// at any depth, each naming the key's full path
// ("line 7: unknown key pipeline.batch.max_row"). yaml.v3's KnownFields
// names neither the path nor survives types with their own UnmarshalYAML
// (rules.NotifierConfig), hence this walk; it runs once at start, so
// reflection is fine here.
func unknownKeys(n *yaml.Node, t reflect.Type) error {
	var errs []error
	walkKeys(n, t, "", &errs)
	return errors.Join(errs...)
}

var yamlNodeType = reflect.TypeFor[yaml.Node]()

func walkKeys(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkKeys(c, t, path, errs)
		}
		return
	case yaml.AliasNode:
		if n.Alias != nil {
			walkKeys(n.Alias, t, path, errs)
		}
		return
	}
	if t == yamlNodeType {
		return // decoded later by its owner
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // a type error, which yaml.Unmarshal reports
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				walkKeys(v, t, path, errs)
				continue
			}
			p := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, fmt.Errorf("line %d: unknown key %s", k.Line, p))
				continue
			}
			walkKeys(v, ft, p, errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			walkKeys(n.Content[i+1], t.Elem(), path+"["+strconv.Quote(n.Content[i].Value)+"]", errs)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			walkKeys(c, t.Elem(), path+"["+strconv.Itoa(i)+"]", errs)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps each YAML key of struct type t to its field's type,
// following yaml.v3's rules: the tag's name, else the lower-cased field
// name; ",inline" structs contribute their keys; "-" and unexported
// fields have none.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}
