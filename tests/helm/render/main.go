// helm-render renders a Helm chart the way `helm template` does, for tests on machines without
// helm (Debian does not package it): the chart's values.yaml merged with -f files, checked
// against values.schema.json before rendering, then every template run through Go's
// text/template with sprig and the Helm functions the tpserve chart uses.
//
//	helm-render --chart DIR [--release NAME] [--namespace NS] [-f values.yaml]... [--notes]
//	            [--upgrade] [--existing objects.yaml]
//
// --upgrade renders as `helm upgrade` does (.Release.IsUpgrade); --existing gives the objects
// the cluster holds, which `lookup` finds (without it, `lookup` finds nothing, as in
// `helm template`).
// Prints the manifests as `helm template` prints them ("---", "# Source: ...", the object),
// or with --notes the rendered NOTES.txt. On bad values or a template error it prints the error
// as helm does ("Error: ...") and exits 1.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// fileList collects a repeated -f flag.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	chartDir := flag.String("chart", "", "the chart's directory (holding Chart.yaml)")
	release := flag.String("release", "tpserve", "the release name")
	namespace := flag.String("namespace", "default", "the release namespace")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	upgrade := flag.Bool("upgrade", false, "render as an upgrade of an installed release")
	existing := flag.String("existing", "", "a YAML file of the objects the cluster holds")
	var valueFiles fileList
	flag.Var(&valueFiles, "f",
		"a values file, merged over the chart's values.yaml (repeatable; later files win)")
	flag.Parse()
	if *chartDir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: helm-render --chart DIR [--release NAME] "+
			"[--namespace NS] [-f values.yaml]... [--notes] [--upgrade] [--existing FILE]")
		os.Exit(2)
	}
	cluster, err := loadObjects(*existing)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: --existing: %v\n", err)
		os.Exit(1)
	}
	install := releaseState{namespace: *namespace, upgrade: *upgrade, cluster: cluster}
	if err := run(*chartDir, *release, install, valueFiles, *notes); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

func run(chartDir, release string, state releaseState, valueFiles []string, notes bool) error {
	chart, err := loadChart(chartDir)
	if err != nil {
		return err
	}
	values, err := chart.values(valueFiles)
	if err != nil {
		return err
	}
	rendered, err := chart.render(values, release, state)
	if err != nil {
		return err
	}
	if notes {
		fmt.Print(rendered.notes)
		return nil
	}
	for _, m := range rendered.manifests {
		fmt.Printf("---\n# Source: %s\n%s\n", m.source, m.content)
	}
	return nil
}
