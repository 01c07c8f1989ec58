// helmrender: renders a Helm chart the way `helm template` does, for tests on machines without
// Helm. It implements the parts of Helm's engine that leapcache's chart uses: Go text/template with
// the sprig functions (minus env/expandenv, as in Helm), include, tpl, required, toYaml, fromYaml,
// toJson/fromJson, lookup (always empty, as in `helm template`), .Values coalesced from the
// chart's values.yaml and -f override files (later files win, null deletes a key), .Release,
// .Chart from Chart.yaml, a minimal .Capabilities, .Files (Get, GetBytes) and .Template. Like Helm
// it validates the merged values against values.schema.json before rendering (schema.go: a
// subset of JSON Schema draft-07 that refuses keywords it does not implement) and checks
// Chart.yaml's kubeVersion against the cluster version.
//
// Usage:
//
//	helmrender render --chart DIR [-f VALUES]... [--release NAME] [--namespace NS]
//	                  [--kube-version v1.30.0] [--api-versions a/v1,b/v1] [--strict]
//	                  [--yaml OUT] [--json OUT] [--notes OUT] [--values-json OUT]
//	helmrender yaml2json FILE
//
// render writes the manifests as `helm template` prints them (--yaml), as a JSON array of
// {"source", "object"} (--json, for checkers without a YAML parser) and the rendered NOTES.txt
// (--notes), and the merged values as JSON (--values-json, written before rendering, for checks
// that compare the output with the values); with none of the first three it prints the YAML on
// stdout. --strict makes a missing map key an
// error, as `helm lint --strict` does. yaml2json prints the documents of a YAML file as a JSON
// array. Exit status: 0 success, 1 a chart, values or template error (message on stderr), 2 usage.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"strings"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "render":
		err = renderCommand(os.Args[2:])
	case "yaml2json":
		if len(os.Args) != 3 {
			usage()
		}
		err = yamlToJSONCommand(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "helmrender: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: helmrender render --chart DIR [-f VALUES]... [--release NAME] "+
		"[--namespace NS] [--kube-version V] [--api-versions LIST] [--strict] [--yaml OUT] "+
		"[--json OUT] [--notes OUT] [--values-json OUT]\n       helmrender yaml2json FILE")
	os.Exit(2)
}

func renderCommand(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	chartDir := fs.String("chart", "", "chart directory")
	var valueFiles stringList
	fs.Var(&valueFiles, "f", "values override file (repeatable; later files win)")
	release := fs.String("release", "leapcache", "release name")
	namespace := fs.String("namespace", "default", "release namespace")
	kubeVersion := fs.String("kube-version", "v1.30.0", "Kubernetes version for .Capabilities")
	apiVersions := fs.String("api-versions", "", "extra API versions for .Capabilities.APIVersions")
	strict := fs.Bool("strict", false, "fail on missing map keys")
	yamlOut := fs.String("yaml", "", "write the manifests here as YAML")
	jsonOut := fs.String("json", "", "write the manifests here as JSON")
	notesOut := fs.String("notes", "", "write the rendered NOTES.txt here")
	valuesOut := fs.String("values-json", "", "write the merged values here as JSON")
	fs.Parse(args)
	if *chartDir == "" || fs.NArg() != 0 {
		usage()
	}

	chart, err := loadChart(*chartDir)
	if err != nil {
		return err
	}
	values := chart.Values
	for _, f := range valueFiles {
		override, err := readValuesFile(f)
		if err != nil {
			return err
		}
		values = coalesce(values, override)
	}
	if chart.Schema != nil {
		if errs := validateSchema(chart.Schema, values); len(errs) > 0 {
			return fmt.Errorf("values don't meet the specifications of the schema of chart %s:\n- %s",
				chart.Metadata.Name, strings.Join(errs, "\n- "))
		}
	}
	if *valuesOut != "" {
		data, err := json.MarshalIndent(values, "", "  ")
		if err != nil {
			return err
		}
		if err := ioutil.WriteFile(*valuesOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	caps, err := newCapabilities(*kubeVersion, *apiVersions)
	if err != nil {
		return err
	}
	if err := checkKubeVersion(chart.Metadata.KubeVersion, caps.KubeVersion.Version); err != nil {
		return err
	}

	out, err := renderChart(chart, renderOptions{
		Values:       values,
		Release:      releaseInfo(*release, *namespace),
		Capabilities: caps,
		Strict:       *strict,
	})
	if err != nil {
		return err
	}
	if *yamlOut == "" && *jsonOut == "" && *notesOut == "" {
		fmt.Print(out.YAML())
		return nil
	}
	if *yamlOut != "" {
		if err := ioutil.WriteFile(*yamlOut, []byte(out.YAML()), 0o644); err != nil {
			return err
		}
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(out.Manifests, "", "  ")
		if err != nil {
			return err
		}
		if err := ioutil.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *notesOut != "" {
		if err := ioutil.WriteFile(*notesOut, []byte(out.Notes), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func yamlToJSONCommand(path string) error {
	data, err := ioutil.ReadFile(path)
	if err != nil {
		return err
	}
	docs, err := parseYAMLDocuments(data)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	encoded, err := json.MarshalIndent(docs, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(encoded))
	return nil
}
