package pipeline

import "github.com/gdist/gdist/models"

// zooModel adapts a built-in model to Model (package train has the same).
type zooModel struct{ *models.Model }

func (m zooModel) NewStage(from, to, batch int, last bool) (Stage, error) {
	g, err := m.NewStageGraph(from, to, batch, last)
	if err != nil {
		return nil, err
	}
	return g, nil
}

func zoo(m *models.Model) Model { return zooModel{m} }
