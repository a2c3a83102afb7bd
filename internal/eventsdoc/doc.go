// Package eventsdoc holds the test that keeps docs/events.md, the list of the
// events nodelet records, in step with the product source.
package eventsdoc
