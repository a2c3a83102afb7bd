package config

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// mergePatch applies an RFC 7386 JSON merge patch to doc and returns the
// result. Objects merge key by key, a null value deletes the key, and any
// other value (lists included) replaces the target. This is the semantics the
// upstream kubelet uses for --config-dir drop-ins, so list fields such as
// clusterDNS are replaced rather than appended.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var target, p any
	if len(doc) > 0 {
		if err := decodeJSONNumbers(doc, &target); err != nil {
			return nil, fmt.Errorf("decoding merge target: %w", err)
		}
	}
	if err := decodeJSONNumbers(patch, &p); err != nil {
		return nil, fmt.Errorf("decoding merge patch: %w", err)
	}
	out, err := json.Marshal(mergeValue(target, p))
	if err != nil {
		return nil, fmt.Errorf("encoding merged document: %w", err)
	}
	return out, nil
}

// mergeValue implements the MergePatch(Target, Patch) pseudo code of RFC 7386.
func mergeValue(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergeValue(tm[k], v)
	}
	return tm
}

// decodeJSONNumbers decodes into generic values keeping numbers as
// json.Number, so large integers survive a round trip exactly.
func decodeJSONNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the JSON value")
	}
	return nil
}
