// Chart loading and the YAML conventions Helm follows.
//
// Helm reads values through sigs.k8s.io/yaml, which converts YAML to JSON first: every number in
// .Values is a float64 (so `{{ .Values.n }}` of 1000000 prints 1e+06 in Helm too) and maps have
// string keys. toYaml goes the same way back (JSON, then YAML), so integers print without an
// exponent and keys come out sorted. This file reproduces both so that a chart that renders
// correctly here renders the same values in Helm.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/ioutil"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver"
	"gopkg.in/yaml.v3"
)

// Metadata is Chart.yaml (apiVersion v2); field names are those templates see as .Chart.*.
type Metadata struct {
	APIVersion   string              `yaml:"apiVersion"`
	Name         string              `yaml:"name"`
	Version      string              `yaml:"version"`
	KubeVersion  string              `yaml:"kubeVersion"`
	Description  string              `yaml:"description"`
	Type         string              `yaml:"type"`
	Keywords     []string            `yaml:"keywords"`
	Home         string              `yaml:"home"`
	Sources      []string            `yaml:"sources"`
	Icon         string              `yaml:"icon"`
	AppVersion   string              `yaml:"appVersion"`
	Deprecated   bool                `yaml:"deprecated"`
	Annotations  map[string]string   `yaml:"annotations"`
	Maintainers  []map[string]string `yaml:"maintainers"`
	Dependencies []interface{}       `yaml:"dependencies"`
}

type templateFile struct {
	Name string // "<chart>/templates/<path>", as Helm names templates
	Data []byte
}

type Chart struct {
	Metadata  Metadata
	Values    map[string]interface{}
	Schema    interface{} // parsed values.schema.json, nil if absent
	Templates []templateFile
	Files     Files // every other file, by path relative to the chart
}

// Files is .Files: the chart's non-template files.
type Files map[string][]byte

// Get returns a file's contents, or "" if there is no such file (as Helm does).
func (f Files) Get(name string) string { return string(f[name]) }

// GetBytes returns a file's contents, or nil.
func (f Files) GetBytes(name string) []byte { return f[name] }

func loadChart(dir string) (*Chart, error) {
	c := &Chart{Files: Files{}}
	meta, err := ioutil.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(meta))
	dec.KnownFields(true) // a misspelt Chart.yaml field is an error, not a silent default
	if err := dec.Decode(&c.Metadata); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if err := checkMetadata(&c.Metadata); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if len(c.Metadata.Dependencies) > 0 {
		return nil, errors.New("Chart.yaml: dependencies are not supported by this renderer")
	}
	if c.Values, err = readValuesFile(filepath.Join(dir, "values.yaml")); err != nil {
		return nil, err
	}
	if schema, err := ioutil.ReadFile(filepath.Join(dir, "values.schema.json")); err == nil {
		if err := json.Unmarshal(schema, &c.Schema); err != nil {
			return nil, fmt.Errorf("values.schema.json: %v", err)
		}
		if err := checkSchemaKeywords(c.Schema, "#"); err != nil {
			return nil, fmt.Errorf("values.schema.json: %v", err)
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}

	ignore, err := readHelmignore(dir)
	if err != nil {
		return nil, err
	}
	// filepath.Walk does not follow symbolic links, but Helm's loader does (a chart may link a
	// file kept elsewhere in the repository), so resolve them here.
	var walk func(rel string) error
	walk = func(rel string) error {
		path := filepath.Join(dir, rel)
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		if rel != "." && ignore(rel, info.IsDir()) {
			return nil
		}
		if info.IsDir() {
			entries, err := ioutil.ReadDir(path)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := walk(filepath.Join(rel, e.Name())); err != nil {
					return err
				}
			}
			return nil
		}
		data, err := ioutil.ReadFile(path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case strings.HasPrefix(rel, "templates/"):
			c.Templates = append(c.Templates, templateFile{c.Metadata.Name + "/" + rel, data})
		case rel == "Chart.yaml" || rel == "values.yaml" || rel == "values.schema.json":
		default:
			c.Files[rel] = data
		}
		return nil
	}
	if err := walk("."); err != nil {
		return nil, err
	}
	sort.Slice(c.Templates, func(i, j int) bool { return c.Templates[i].Name < c.Templates[j].Name })
	return c, nil
}

func checkMetadata(m *Metadata) error {
	if m.APIVersion != "v2" {
		return fmt.Errorf("apiVersion must be v2 (got %q)", m.APIVersion)
	}
	if m.Name == "" {
		return errors.New("name is required")
	}
	if _, err := semver.StrictNewVersion(m.Version); err != nil {
		return fmt.Errorf("version %q is not SemVer 2: %v", m.Version, err)
	}
	if m.Type != "" && m.Type != "application" && m.Type != "library" {
		return fmt.Errorf("type must be application or library (got %q)", m.Type)
	}
	if m.KubeVersion != "" {
		if _, err := semver.NewConstraint(m.KubeVersion); err != nil {
			return fmt.Errorf("kubeVersion %q: %v", m.KubeVersion, err)
		}
	}
	return nil
}

// checkKubeVersion fails as `helm install` does when the cluster is outside Chart.yaml's range.
func checkKubeVersion(constraint, version string) error {
	if constraint == "" {
		return nil
	}
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return err
	}
	v, err := semver.NewVersion(version)
	if err != nil {
		return fmt.Errorf("kube version %q: %v", version, err)
	}
	if !c.Check(v) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
			constraint, version)
	}
	return nil
}

// readHelmignore supports the common .helmignore forms: comments, "dir/" patterns and shell
// globs matched against the relative path and its base name.
func readHelmignore(dir string) (func(rel string, isDir bool) bool, error) {
	data, err := ioutil.ReadFile(filepath.Join(dir, ".helmignore"))
	if os.IsNotExist(err) {
		return func(string, bool) bool { return false }, nil
	} else if err != nil {
		return nil, err
	}
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf(".helmignore: negated patterns are not supported: %s", line)
		}
		patterns = append(patterns, line)
	}
	return func(rel string, isDir bool) bool {
		rel = filepath.ToSlash(rel)
		for _, p := range patterns {
			dirOnly := strings.HasSuffix(p, "/")
			p = strings.TrimSuffix(p, "/")
			if dirOnly && !isDir {
				continue
			}
			if ok, _ := filepath.Match(p, rel); ok {
				return true
			}
			if ok, _ := filepath.Match(p, filepath.Base(rel)); ok {
				return true
			}
		}
		return false
	}, nil
}

// readValuesFile reads a values file the way Helm does: one YAML document, a map at the top.
func readValuesFile(path string) (map[string]interface{}, error) {
	data, err := ioutil.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs, err := parseYAMLDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(docs) == 0 || docs[0] == nil {
		return map[string]interface{}{}, nil
	}
	if len(docs) > 1 {
		return nil, fmt.Errorf("%s: a values file holds one YAML document", path)
	}
	m, ok := docs[0].(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: values must be a map at the top level", path)
	}
	return m, nil
}

// coalesce merges override into base as Helm merges user values into chart defaults: maps merge
// key by key, anything else is replaced, and a null override deletes the key. Neither argument is
// modified.
func coalesce(base, override map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if v == nil {
			delete(out, k)
			continue
		}
		bm, baseIsMap := out[k].(map[string]interface{})
		om, overrideIsMap := v.(map[string]interface{})
		if baseIsMap && overrideIsMap {
			out[k] = coalesce(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// parseYAMLDocuments decodes every document of a YAML stream into JSON-compatible values
// (map[string]interface{}, []interface{}, float64, string, bool, nil). Documents holding only
// comments decode to nil and are dropped.
func parseYAMLDocuments(data []byte) ([]interface{}, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []interface{}
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		var v interface{}
		if err := node.Decode(&v); err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		j, err := jsonCompatible(v)
		if err != nil {
			return nil, err
		}
		docs = append(docs, j)
	}
	return docs, nil
}

// jsonCompatible converts decoded YAML into what sigs.k8s.io/yaml yields: a JSON round trip.
func jsonCompatible(v interface{}) (interface{}, error) {
	data, err := json.Marshal(stringKeys(v))
	if err != nil {
		return nil, err
	}
	var out interface{}
	err = json.Unmarshal(data, &out)
	return out, err
}

// stringKeys turns map[interface{}]interface{} (YAML maps with non-string keys) into
// map[string]interface{} so that JSON can encode them; sigs.k8s.io/yaml does the same.
func stringKeys(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, x := range t {
			out[k] = stringKeys(x)
		}
		return out
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, x := range t {
			out[fmt.Sprint(k)] = stringKeys(x)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, x := range t {
			out[i] = stringKeys(x)
		}
		return out
	default:
		return v
	}
}

// toYAML is Helm's toYaml: JSON encoding first (sorted keys, integers without exponents), then
// YAML with two-space indentation and no trailing newline. Errors give "" as in Helm.
func toYAML(v interface{}) string {
	data, err := json.Marshal(stringKeys(v))
	if err != nil {
		return ""
	}
	var node yaml.Node
	if err := yaml.Unmarshal(data, &node); err != nil {
		return ""
	}
	plainStyle(&node) // JSON's quoted, flow-style layout -> ordinary block YAML
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return ""
	}
	enc.Close()
	return strings.TrimSuffix(buf.String(), "\n")
}

func plainStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}

// fromYAML is Helm's fromYaml: a map, or {"Error": message} when the text is not a YAML map.
func fromYAML(text string) map[string]interface{} {
	docs, err := parseYAMLDocuments([]byte(text))
	if err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	if len(docs) == 0 {
		return map[string]interface{}{}
	}
	m, ok := docs[0].(map[string]interface{})
	if !ok {
		return map[string]interface{}{"Error": "not a YAML map"}
	}
	return m
}

// fromYAMLArray is Helm's fromYamlArray.
func fromYAMLArray(text string) []interface{} {
	docs, err := parseYAMLDocuments([]byte(text))
	if err != nil {
		return []interface{}{err.Error()}
	}
	if len(docs) == 0 {
		return []interface{}{}
	}
	a, ok := docs[0].([]interface{})
	if !ok {
		return []interface{}{"not a YAML list"}
	}
	return a
}

// fromJSON is Helm's fromJson.
func fromJSON(text string) map[string]interface{} {
	var m map[string]interface{}
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	return m
}

// splitManifests splits a rendered template into its documents as Helm's releaseutil does.
var manifestSeparator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

func splitManifests(text string) []string {
	var out []string
	for _, doc := range manifestSeparator.Split(text, -1) {
		if strings.TrimSpace(doc) != "" {
			out = append(out, strings.TrimSpace(doc)+"\n")
		}
	}
	return out
}
