package redfishsim

import (
	"net/http"
	"slices"
)

// reset runs ComputerSystem.Reset; a refused transition is 409 and
// changes nothing.
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var body struct{ ResetType string }
	if !readBody(w, r, &body) {
		return
	}
	if !slices.Contains(resetTypes[:5], body.ResetType) {
		redfishError(w, http.StatusBadRequest, "Base.1.8.ActionParameterNotSupported", "ResetType is not supported")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	on := s.state.PowerOn
	var err error
	switch body.ResetType {
	case "On":
		if on {
			redfishError(w, http.StatusConflict, "Base.1.8.PropertyValueConflict", "the system is already on")
			return
		}
		err = s.setPower(true)
	case "ForceOff", "GracefulShutdown":
		if !on {
			redfishError(w, http.StatusConflict, "Base.1.8.PropertyValueConflict", "the system is already off")
			return
		}
		err = s.setPower(false)
	case "ForceRestart":
		if !on {
			redfishError(w, http.StatusConflict, "Base.1.8.PropertyValueConflict", "the system is off")
			return
		}
		err = s.restart()
	case "PowerCycle":
		if on {
			err = s.restart()
		} else {
			err = s.setPower(true)
		}
	}
	if err != nil {
		redfishError(w, http.StatusInternalServerError, "Base.1.8.InternalError", "the machine did not follow")
		return
	}
	s.state.Resets = append(s.state.Resets, body.ResetType)
	w.WriteHeader(http.StatusNoContent)
}

// setPower and restart run with s.mu held.
func (s *Server) setPower(on bool) error {
	if s.cfg.Machine != nil {
		if err := s.cfg.Machine.SetPower(on); err != nil {
			return err
		}
	}
	s.state.PowerOn = on
	return nil
}

func (s *Server) restart() error {
	if s.cfg.Machine != nil {
		return s.cfg.Machine.Restart()
	}
	return nil
}
